"""Counter-based uniforms and inverse-CDF draws for the CPU sampling path.

A sampled row draws ONE uniform per try from its (seed, step, draw) and takes the first column
whose running mass exceeds u * total: exactly a draw from the row's (unnormalised) weights, at
the cost of a cumsum, and never a column of weight 0.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def uniform_cpu(seeds: torch.Tensor, steps: torch.Tensor, draw: int = 0) -> torch.Tensor:
    """(B,) float64 in (0, 1): a hash of each row's (seed, step, draw), 24 bits, odd multiples
    of 2**-25 (`draw` numbers a row's retries within one step).

    splitmix64 of the mixed seed plus (step + 1) golden-ratio increments (its own sequence for
    each seed), then splitmix64 again; uint64 arithmetic wraps in numpy."""
    s = seeds.to(torch.int64).numpy().astype(np.uint64)
    t = steps.to(torch.int64).numpy().astype(np.uint64)
    z = _splitmix64(_splitmix64(s) + (t + np.uint64(1)) * _GOLDEN)
    if draw:
        z = _splitmix64(z + np.uint64((draw * int(_MIX2)) & 0xFFFFFFFFFFFFFFFF))
    top = (z >> np.uint64(40)).astype(np.float64)  # 24 bits
    return torch.from_numpy((top * 2.0 + 1.0) * 2.0**-25)


def invert_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(R,) int64: for each row of `cdf` (R, V) (running sums of weights >= 0, total > 0) the
    first column with cdf > u * total, `u` (R,) in (0, 1)."""
    total = cdf[:, -1:]
    target = (u.to(torch.float32)[:, None] * total).clamp_(max=total)
    ids = torch.searchsorted(cdf, target, right=True)[:, 0]
    over = ids >= cdf.shape[1]  # u * total rounded up to total: take the last weighted column
    if bool(over.any()):
        rows = over.nonzero()[:, 0]
        last = (cdf[rows] < total[rows]).sum(dim=1)
        ids[rows] = last.clamp_(max=cdf.shape[1] - 1)
    return ids
