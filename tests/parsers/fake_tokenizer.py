"""A character tokenizer with special tokens: enough to test id-based markers without a model."""

from __future__ import annotations

import re
from collections.abc import Sequence


class CharTokenizer:
    unk_token = "<unk>"
    unk_token_id = 0

    def __init__(self, specials: Sequence[str]) -> None:
        self.special_ids = {tok: i + 1 for i, tok in enumerate(specials)}
        self.id_specials = {i: t for t, i in self.special_ids.items()}
        alts = sorted(specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(s) for s in alts) + ")")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self.special_ids:
                ids.append(self.special_ids[piece])
            else:
                ids += [1000 + ord(c) for c in piece]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        out = []
        for i in ids:
            if i in self.id_specials:
                out.append("" if skip_special_tokens else self.id_specials[i])
            else:
                out.append(chr(i - 1000))
        return "".join(out)

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.special_ids.get(token, self.unk_token_id)
