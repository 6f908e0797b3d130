"""The CPU path's shortest route: a few rows with nothing but a temperature, or all-greedy rows.

A batch of 1-4 rows (the server at low concurrency) spends more time in the dense route's
bookkeeping (tensor-building, ~25 numpy and torch calls) than in its passes over the logits.
`sample_plain` takes the rows' host values and draws each row with the same arithmetic as
`sample_rows` (the same torch softmax into the same workspace, the same 64-column chunk sums,
the same float64 running sums and uniform), so a row gets the same token here as on the dense
route, alone or in any batch: only the number of calls differs. Larger batches whose rows all
sample go straight to `sample_rows`'s fused route (`sample_all`), all-greedy batches of any
size take one numpy argmax. Anything out of the ordinary
(a NaN, a row with no finite weight, a vocabulary that is not a multiple of 64 columns) returns
None, and the caller takes the full path.

For one sampled row with weights ``w`` (softmax(x / T), fp32) and chunk sums ``s``::

    cdf    = float64 running sum of s          target = u * cdf[-1]
    chunk  = number of cdf entries <= target   (clamped to the last chunk)
    local  = float64 running sum of w[chunk]   rest = target - cdf[chunk - 1]
    id     = 64 * chunk + number of local entries <= rest   (the chunk's last weighted column
                                                             if a rounding gap leaves none)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from thinkgate.kernels.cpu.inverse_cdf import CHUNK
from thinkgate.kernels.cpu.sample_rows import sample_all
from thinkgate.kernels.cpu.weights import inverse_temperature, sampling_scale, workspace

PLAIN_ROWS = 4  # sampled batches up to this size go row by row; larger ones, every row
# sampled, take `sample_rows`'s fused route directly
_M64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15
_INVERSE_TEMPERATURE: dict[float, float] = {}  # T -> fp32 ln(2) * log2(e) / T, as sample_rows


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def uniform_py(seed: int, step: int) -> float:
    """`inverse_cdf.uniform_cpu` of one row's (seed, step) with draw 0, in Python ints."""
    z = _mix((_mix(seed & _M64) + ((step + 1) & _M64) * _GOLDEN) & _M64)
    return ((z >> 40) * 2.0 + 1.0) * 2.0**-25


def sample_plain(
    logits: torch.Tensor,
    temperatures: Sequence[float],
    seeds: Sequence[int],
    steps: Sequence[int],
) -> list[int] | None:
    """Token ids for CPU `logits` (B, V) float with no mask, filter, logprob or processor:
    rows with temperature <= 0 take the first maximal logit, the others one inverse-CDF draw
    (`sample_rows`'s tokens exactly). None when the full path must decide: more than
    `PLAIN_ROWS` rows mixing greedy and sampled ones, V not a multiple of 64, a NaN or all -inf
    greedy row, or a sampled row whose weights are not finite (NaN, +inf, x / T overflowing)
    or all zero. `seeds` and `steps` are read for sampled rows only (empty when all are
    greedy)."""
    num_rows, num_cols = logits.shape
    if num_cols == 0 or num_cols % CHUNK:
        return None
    greedy = [t <= 0 for t in temperatures]
    x = logits.detach()
    if all(greedy):
        if logits.dtype != torch.float32:
            return None
        rows = x.numpy()
        at = rows.argmax(axis=1)
        best = rows[np.arange(num_rows), at]
        if bool(np.isnan(best).any() or (best == -np.inf).any()):
            return None
        return at.tolist()
    if num_rows > PLAIN_ROWS:
        if any(greedy):
            return None
        ids = sample_all(x, torch.from_numpy(np.array(temperatures, dtype=np.float32)),
                          torch.from_numpy(np.array(seeds, dtype=np.int64)),
                          torch.from_numpy(np.array(steps, dtype=np.int64)), 0)
        return None if ids is None else ids.tolist()
    ids = []
    for row in range(num_rows):
        if greedy[row]:
            got = _greedy_row(x[row])
        else:
            got = _draw_row(x[row:row + 1], temperatures[row], seeds[row], steps[row])
        if got is None:
            return None
        ids.append(got)
    return ids


def _greedy_row(x: torch.Tensor) -> int | None:
    if x.dtype == torch.float32:
        row = x.numpy()
        at = int(row.argmax())
        value = float(row[at])
    else:
        best, index = x.max(dim=0)
        at, value = int(index), float(best)
    return None if math.isnan(value) or value == -math.inf else at


def _draw_row(x: torch.Tensor, temperature: float, seed: int, step: int) -> int | None:
    """One row (1, V): `softmax_weights` then `invert_chunked` of `sample_rows`, per row."""
    num_cols = x.shape[1]
    inv_t = _INVERSE_TEMPERATURE.get(temperature)
    if inv_t is None:
        scale = sampling_scale(np.array([temperature], dtype=np.float32))
        inv_t = float(inverse_temperature(scale)[0])
        if len(_INVERSE_TEMPERATURE) < 1024:
            _INVERSE_TEMPERATURE[temperature] = inv_t
    w = workspace(1, num_cols)
    if x.dtype == torch.float32 and inv_t == 1.0:
        torch._softmax(x, 1, False, out=w)
    else:
        torch.mul(x, inv_t, out=w)
        torch._softmax(w, 1, False, out=w)
    num_chunks = num_cols // CHUNK
    sums = w.view(1, num_chunks, CHUNK).sum(dim=2).numpy()[0]
    cdf = sums.cumsum(dtype=np.float64)
    total = float(cdf[-1])
    if not (math.isfinite(total) and total > 0):
        return None
    target = uniform_py(seed, step) * total
    chunk = min(int(cdf.searchsorted(target, side="right")), num_chunks - 1)
    rest = target - (float(cdf[chunk - 1]) if chunk else 0.0)
    local = w.numpy()[0, chunk * CHUNK:(chunk + 1) * CHUNK].cumsum(dtype=np.float64)
    at = int(local.searchsorted(rest, side="right"))
    if at >= CHUNK:
        at = min(int((local < local[-1]).sum()), CHUNK - 1)
    return chunk * CHUNK + at
