"""Inputs for the kernel tests: random logits and bitmasks with every kind of 32-bit word."""

from __future__ import annotations

import torch


def random_bitmask(rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """(rows, ceil(vocab/32)) int32 mixing all-banned, all-allowed, sparse and random words."""
    words = (vocab + 31) // 32
    rand = torch.randint(-(2**31), 2**31, (rows, words), generator=gen, dtype=torch.int64)
    sparse = 1 << torch.randint(0, 32, (rows, words), generator=gen, dtype=torch.int64)
    kind = torch.randint(0, 4, (rows, words), generator=gen)
    out = torch.where(kind == 0, 0, torch.where(kind == 1, -1, torch.where(kind == 2, sparse, rand)))
    out = torch.where(out >= 2**31, out - 2**32, out)
    return out.to(torch.int32)


def random_logits(
    rows: int, vocab: int, dtype: torch.dtype, gen: torch.Generator, pad: int = 0
) -> torch.Tensor:
    """(rows, vocab) logits as a view with row stride vocab + pad (pad > 0: strided rows)."""
    full = torch.randn(rows, vocab + pad, generator=gen) * 3
    return full.to(dtype)[:, :vocab]
