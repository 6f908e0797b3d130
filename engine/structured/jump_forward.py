"""Jump-forward decoding: write the text a grammar forces without a decode step per token.

After a step, a row whose grammar applies may have only one way to go on for a while (a JSON
key and its `": "`, the rest of the only enum value that fits, a closing `"}`). `JumpForward`
asks the row's matcher for that forced text (`find_jump_forward_string`: a few microseconds, so
it is asked every step), turns it into token ids, advances the matcher over them, and returns
them; the engine puts them in `seq.forced_ids`, its next forward computes them together with
the last sampled token (one ragged step instead of one step per token), and they become output
tokens before that step's sampled one.

Which ids: xgrammar's `find_jump_forward_tokens` covers the forced text greedily and leaves out
a last token that a longer vocabulary token extends (the model may want to write that longer
token, e.g. `"` followed by free text). The text those ids cover is then encoded again with the
model's own tokenizer, so the ids are the ones the model saw in training (BPE merges, not
greedy longest matches); when that encoding does not decode back to exactly the covered text,
or the matcher refuses it, xgrammar's ids are used. Never inside thinking: the caller only asks
rows whose grammar applies to the next token.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


class JumpForward:
    """tokenizer: the model's Hugging Face tokenizer (its fast backend is used when present)."""

    def __init__(self, tokenizer: Any) -> None:
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        self.tokenizer = tokenizer
        self.num_jumps = 0  # rows that jumped, and the ids they got, since start
        self.num_forced_tokens = 0

    def forced_ids(self, matcher: Any, limit: int) -> list[int]:
        """Ids that write the text `matcher` forces now, at most `limit`; the matcher has
        accepted them on return (nothing changes when the list is empty)."""
        if limit <= 0 or not matcher.find_jump_forward_string():
            return []
        greedy = list(matcher.find_jump_forward_tokens())
        if not greedy:
            return []
        ids = self._natural(greedy)
        for candidate in (ids, greedy):
            candidate = candidate[:limit]
            if candidate and _accept_all(matcher, candidate):
                self.num_jumps += 1
                self.num_forced_tokens += len(candidate)
                return candidate
        return []

    def _natural(self, greedy: list[int]) -> list[int]:
        """The tokenizer's own encoding of the text `greedy` covers, or `greedy` itself."""
        text = self._decode(greedy)
        if "\ufffd" in text:  # the ids split a character: only xgrammar's bytes are exact
            return greedy
        ids = self._encode(text)
        if ids == greedy or not ids or self._decode(ids) != text:
            return greedy
        return ids

    def _decode(self, ids: list[int]) -> str:
        if self.backend is not None:
            return self.backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _encode(self, text: str) -> list[int]:
        if self.backend is not None:
            return list(self.backend.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _accept_all(matcher: Any, ids: list[int]) -> bool:
    """Advance `matcher` over every id, or leave it as it was and return False."""
    for n, token in enumerate(ids):
        if not matcher.accept_token(int(token)):
            if n:
                matcher.rollback(n)
            return False
    return True
