"""Generate strings under an xgrammar grammar by a seeded random walk over a tiny vocabulary.

The vocabulary is every printable ASCII character, newline, a few non-ASCII characters and the
format's markers as whole tokens. At each step the grammar's token mask gives the allowed tokens;
one is drawn at random (closing punctuation, markers and, after a while, the stop token weigh
more, so walks end). This is an honest sample of what the grammar lets a model write.
"""

from __future__ import annotations

import random

import torch
import xgrammar as xgr

EXTRA = ["é", "中", "\t", "  ", "true", "false", "null", "True", "False", "None"]
CLOSERS = set('"}])>|,')
SPACE = {" ", "\n", "\t", "  "}


class Walker:
    def __init__(self, markers: list[str]) -> None:
        chars = [chr(c) for c in range(32, 127)] + ["\n"]
        joined = [m for m in markers if m not in chars]
        joined += ["\n" + m for m in joined] + [m + "\n" for m in joined]
        pieces = list(dict.fromkeys(chars + EXTRA + joined))
        self.vocab = pieces + ["<eos>"]
        self.eos = len(self.vocab) - 1
        self.special = {i for i, p in enumerate(self.vocab) if len(p) > 2 and p in joined}
        self.info = xgr.TokenizerInfo(self.vocab, vocab_type=xgr.VocabType.RAW,
                                      stop_token_ids=[self.eos])
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)

    def generate(self, structural_tag: str, seed: int, max_steps: int = 600) -> str | None:
        compiled = self.compiler.compile_structural_tag(structural_tag)
        matcher = xgr.GrammarMatcher(compiled)
        rng = random.Random(seed)
        mask = xgr.allocate_token_bitmask(1, len(self.vocab))
        out: list[str] = []
        for step in range(max_steps):
            matcher.fill_next_token_bitmask(mask)
            allowed = xgr.testing.bitmask_to_bool_mask(mask, len(self.vocab))[0]
            ids = torch.nonzero(allowed).flatten().tolist()
            if not ids:
                return None
            weights = [self._weight(i, step) for i in ids]
            tok = rng.choices(ids, weights)[0]
            if not matcher.accept_token(tok):
                raise AssertionError(f"grammar refused token {self.vocab[tok]!r} it allowed")
            if tok == self.eos:
                return "".join(out)
            out.append(self.vocab[tok])
        return None

    def _weight(self, i: int, step: int) -> float:
        if i == self.eos:
            return 1.0 + step
        if i in self.special:
            return 30.0
        piece = self.vocab[i]
        if piece in SPACE:
            return 0.1
        return 6.0 + step / 20 if piece in CLOSERS else 1.0
