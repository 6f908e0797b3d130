"""Counter-based uniforms and inverse-CDF draws for the CPU sampling path.

A sampled row draws ONE uniform per try from its (seed, step, draw) and takes the first column
whose running mass exceeds u * total: exactly a draw from the row's (unnormalised) weights, and
never a column of weight 0. `invert_cdf` takes a full running sum; `invert_chunked` needs only
the sums of 64-column chunks (one vectorised reduction instead of a sequential cumsum)::

    chunk   = first j with cumsum(chunk_sums)[j] > u * total
    rest    = u * total - cumsum(chunk_sums)[j - 1]
    id      = 64 * chunk + first i with cumsum(w[chunk])[i] > rest
"""

from __future__ import annotations

import numpy as np
import torch

CHUNK = 64  # columns per chunk of `invert_chunked`'s weights

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
    s = seeds.to(torch.int64).numpy()
    t = steps.to(torch.int64).numpy()
    return torch.from_numpy(uniforms_np(s, t, draw, 1)[:, 0])


def uniforms_np(seeds: np.ndarray, steps: np.ndarray, first: int, num_draws: int
                ) -> np.ndarray:
    """(B, num_draws) float64: column d is `uniform_cpu(seeds, steps, first + d)` (int64
    `seeds`, `steps` (B,))."""
    z = _splitmix64(_splitmix64(seeds.astype(np.uint64))
                    + (steps.astype(np.uint64) + np.uint64(1)) * _GOLDEN)[:, None]
    if first or num_draws > 1:
        draws = np.arange(first, first + num_draws, dtype=np.uint64)[None, :]
        z = np.where(draws == 0, z, _splitmix64(z + draws * _MIX2))
    top = (z >> np.uint64(40)).astype(np.float64)  # 24 bits
    return (top * 2.0 + 1.0) * 2.0**-25


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


def invert_np(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """`invert_cdf` in numpy for small float32 `cdf` (R, N) and `u` (R, D): (R, D) int64."""
    total = cdf[:, -1:]
    target = np.minimum((u * total).astype(np.float32), total)
    at = (cdf[:, None, :] <= target[:, :, None]).sum(axis=2)
    over = at >= cdf.shape[1]  # u * total rounded up to total: the last weighted column
    if over.any():
        last = np.minimum((cdf < total).sum(axis=1, keepdims=True), cdf.shape[1] - 1)
        at = np.where(over, last, at)
    return at


def invert_chunked(w: torch.Tensor, u: np.ndarray, totals: bool = False
                   ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """(R, D) int64 (and with `totals` each row's total weight, float64): `invert_cdf` of
    weights `w` (R, V) fp32 (>= 0, V a multiple of CHUNK) for each of the uniforms `u` (R, D);
    the ids of a row whose total is not finite and positive are in range but meaningless.

    Each chunk is reduced on its own and the rest (in float64) runs in numpy on (R, V / CHUNK)
    sums, so a row never depends on its batch. In float64, u * total < total, so a chunk always
    holds the target; only a rounding gap between a chunk's sum and its running sum can leave
    `rest` past the chunk's end, and that takes the chunk's last weighted column."""
    num_rows, num_cols = w.shape
    num_chunks = num_cols // CHUNK
    sums = w.view(num_rows, num_chunks, CHUNK).sum(dim=2).numpy()
    cdf = np.zeros((num_rows, num_chunks + 1))
    np.cumsum(sums, axis=1, out=cdf[:, 1:])
    target = u * cdf[:, -1:]  # (R, D)
    chunk = (cdf[:, None, 1:] <= target[:, :, None]).sum(axis=2)  # first chunk past the target
    chunk = np.minimum(chunk, num_chunks - 1)  # only a row without a finite positive total
    every = np.arange(num_rows)[:, None]
    rest = target - cdf[every, chunk]
    local = np.cumsum(w.numpy().reshape(num_rows, num_chunks, CHUNK)[every, chunk], axis=2,
                      dtype=np.float64)  # (R, D, CHUNK)
    at = (local <= rest[:, :, None]).sum(axis=2)
    if (at >= CHUNK).any():
        last = np.minimum((local < local[:, :, -1:]).sum(axis=2), CHUNK - 1)
        at = np.where(at >= CHUNK, last, at)
    ids = chunk * CHUNK + at
    return (ids, cdf[:, -1]) if totals else ids
