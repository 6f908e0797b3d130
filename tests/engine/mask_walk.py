"""Walk token ids through a grammar row's mask, as the engine's steps would (shared by the
grammar tests in tests/constrained and tests/benchmarks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def walks(grammar: Any, row: Any, token_ids: Iterable[int]) -> bool:
    """Whether every id is allowed by the row's mask at its step and accepted by its matcher."""
    for token in token_ids:
        mask = grammar.fill_bitmask([row])
        if mask is None or not (int(mask[0, token >> 5]) >> (token & 31)) & 1:
            return False
        if not row.accept(token):
            return False
    return True
