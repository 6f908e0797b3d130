"""A row's sampling weights on the CPU path, in a reused per-thread workspace.

``w[c] = 2 ** ((x[c] - max) * log2(e) / T)`` (banned columns weigh 0), or the fused
softmax(x / T) when the row's width and values allow it: proportional weights either way, whose
64-column chunk sums place a draw (`inverse_cdf.invert_chunked`). Shared by the dense route
(sample_rows.py) and the filtered one (sample_filtered.py).
"""

from __future__ import annotations

import threading

import numpy as np
import torch
from thinkgate.kernels.cpu.inverse_cdf import CHUNK
from thinkgate.kernels.sampling import LOG2E

LN2 = 0.6931471805599453
_MIN_TEMPERATURE = 1e-38  # log2(e) / T stays below the float32 maximum
_WORKSPACE = threading.local()
MAX_WORKSPACE = 16 * 2**20  # floats per kept buffer (64 MiB): ~100 rows of a 150k vocabulary


def weights(x: torch.Tensor, best: torch.Tensor, scale: np.ndarray, slot: int = 0
            ) -> torch.Tensor:
    """(R, CHUNK * ceil(V / CHUNK)) fp32 weights proportional to softmax(x / T) of `x` (R, V)
    (banned -> 0), zero-padded, in this thread's reused workspace `slot` (the next call with
    the same slot overwrites it). `best` (R,) is each row's finite maximum.

    A row's formula depends only on V and on the row itself, so it gets the same weights alone
    or in any batch: the fused softmax(x * log(2) * scale) when V is a multiple of CHUNK and x
    / T cannot overflow at the maximum, else ``2 ** ((x - best) * scale)`` (`exp2_rows`)."""
    if x.shape[1] % CHUNK:
        return exp2_weights(x, best, scale, slot)
    w = softmax_weights(x, scale, slot)
    with np.errstate(over="ignore"):
        safe = np.isfinite(best.numpy() * inverse_temperature(scale))
    if not safe.all():
        exp2_rows(w, x, best, scale, np.flatnonzero(~safe))
    return w


def exp2_weights(x: torch.Tensor, best: torch.Tensor, scale: np.ndarray, slot: int = 0
                 ) -> torch.Tensor:
    """`weights` by ``2 ** ((x - best) * scale)`` for every row: the maximum -> 1 exactly."""
    num_rows, num_cols = x.shape
    w = workspace(num_rows, -(-num_cols // CHUNK) * CHUNK, slot)
    w[:, num_cols:] = 0.0
    exp2_rows(w, x, best, scale, None)
    return w


def exp2_rows(w: torch.Tensor, x: torch.Tensor, best: torch.Tensor, scale: np.ndarray,
              rows: np.ndarray | None) -> None:
    """Write ``2 ** ((x - best) * scale)`` (the maximum -> 1 exactly) into `w`'s first V
    columns, for `rows` (None: all)."""
    num_cols = x.shape[1]
    if rows is None:
        head = w[:, :num_cols]
        torch.sub(x, best[:, None], out=head)
        head.mul_(torch.from_numpy(scale)[:, None]).exp2_()
        return
    index = torch.from_numpy(rows)
    part = x[index].float().sub_(best[index, None]).mul_(torch.from_numpy(scale[rows])[:, None])
    w[:, :num_cols].index_copy_(0, index, part.exp2_())


def softmax_weights(x: torch.Tensor, scale: np.ndarray, slot: int = 0) -> torch.Tensor:
    """(R, V) fp32 softmax(x * scale * ln 2) of `x` (R, V), V a multiple of CHUNK, in the
    workspace `slot`, in one fused pass (two when T != 1). Not finite where a row has NaN,
    +inf, overflows x / T or bans every column."""
    num_rows, num_cols = x.shape
    w = workspace(num_rows, num_cols, slot)
    inv_t = inverse_temperature(scale)
    if x.dtype == torch.float32 and (inv_t == 1).all():
        return torch._softmax(x, 1, False, out=w)
    torch.mul(x, torch.from_numpy(inv_t)[:, None], out=w)
    return torch._softmax(w, 1, False, out=w)  # (in place: each row is read before written)


def inverse_temperature(scale: np.ndarray) -> np.ndarray:
    """fp32 ln(2) * `scale` = 1 / T per row: the factor `softmax_weights` multiplies x by."""
    return (scale.astype(np.float64) * LN2).astype(np.float32)


def sampling_scale(temperature: np.ndarray) -> np.ndarray:
    """(B,) fp32 log2(e) / T for sampling rows (kept finite as T -> 0), 0 for greedy rows."""
    t = temperature.astype(np.float32)
    scale = np.float32(LOG2E) / np.maximum(t, np.float32(_MIN_TEMPERATURE))
    return np.where(t > 0, scale, np.float32(0))


def workspace(num_rows: int, num_cols: int, slot: int = 0) -> torch.Tensor:
    """A (num_rows, num_cols) fp32 view of this thread's buffer `slot`, grown as needed (up to
    `MAX_WORKSPACE` floats kept; a larger request gets a fresh tensor)."""
    size = num_rows * num_cols
    if size > MAX_WORKSPACE:
        return torch.empty(num_rows, num_cols, dtype=torch.float32)
    buffers = getattr(_WORKSPACE, "buffers", None)
    if buffers is None:
        buffers = _WORKSPACE.buffers = {}
    buf = buffers.get(slot)
    if buf is None or buf.numel() < size:
        with torch.inference_mode(False):  # a normal tensor: writable in and out of that mode
            buf = buffers[slot] = torch.empty(size, dtype=torch.float32)
    return buf[:size].view(num_rows, num_cols)
