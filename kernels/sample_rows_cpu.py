"""The CPU path's dense route: each row under its mask, then greedy or one draw.

Greedy rows take the first maximal allowed column; sampled rows invert the CDF of
softmax(x / T) over the allowed columns with one `uniform_cpu` draw (see sample_cpu.py). An
unmasked batch is read in place: the row maxima (a reduction), then ONE pass writes each row's
weights ``2 ** ((x - max) * log2(e) / T)`` into a reused workspace, whose 64-column chunk sums
place the draw (`inverse_cdf.invert_chunked`); the argmax runs only on greedy rows.
"""

from __future__ import annotations

import threading

import numpy as np
import torch
import torch.nn.functional as F
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.inverse_cdf import CHUNK, invert_chunked, uniforms_np
from thinkgate.kernels.sample_filtered_cpu import sample_filtered
from thinkgate.kernels.sampling import LOG2E

_LN2 = 0.6931471805599453
_MIN_TEMPERATURE = 1e-38  # log2(e) / T stays below the float32 maximum
_MASK_TABLES: dict[torch.device, torch.Tensor] = {}
_WORKSPACE = threading.local()
MAX_WORKSPACE = 16 * 2**20  # floats per kept buffer (64 MiB): ~100 rows of a 150k vocabulary


def sample_rows(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    use: torch.Tensor | None = None,
    limit: int = 0,
    filters: tuple[torch.Tensor | None, ...] = (None, None, None),
    logprobs: bool = False,
    draw: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every row under its mask (where `use`), NaN banned, filters as a floor: greedy rows take
    the first maximal column, sampled rows invert their CDF with `uniform_cpu(..., draw)`.

    Per-row bookkeeping runs in numpy (a torch call on 32 numbers costs ~5 us, about as much as
    a pass over 8k logits); torch does the passes over the (B, V) logits."""
    num_rows = logits.shape[0]
    filtered = any(f is not None for f in filters)
    if bitmask is None and not filtered and not logprobs:
        ids = sample_all(logits, temperature, seeds, steps, draw)
        if ids is not None:
            return ids, None
    rows = use.nonzero()[:, 0] if bitmask is not None and use is not None else None
    x, ours = logits, False  # read in place unless masked, NaN-cleaned or floored
    if rows is not None and rows.numel() == num_rows:
        x, ours = masked(logits, bitmask, limit), True  # (B, V)
    elif rows is not None and rows.numel():
        x, ours = logits.to(torch.float32, copy=True), True  # (B, V), masked in place
        x.index_copy_(0, rows, masked(x.index_select(0, rows), bitmask[rows], limit))
    best = x.amax(dim=1).float()
    if np.isnan(best.numpy()).any():  # NaN is never allowed; only then pay for the rewrite
        x = x if ours else x.to(torch.float32, copy=True)
        x.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
        best, ours = x.amax(dim=1), True
    if filtered and logprobs:  # the logprob's normaliser needs the floor itself
        x = x if ours and x.dtype == torch.float32 else x.to(torch.float32, copy=True)
        floor = logit_floor_sparse(x, temperature, *filters)
        x.masked_fill_(x < floor[:, None], float("-inf"))
        filtered = False
    top = best.numpy()
    scale = sampling_scale(temperature.numpy())
    live = top > -np.inf
    sampled = (scale > 0) & live & (top < np.inf)
    ids = np.full(num_rows, -1, dtype=np.int64)
    pick = np.flatnonzero(live & ~sampled)  # greedy rows: the first maximal column
    if pick.size:
        part = x if pick.size == num_rows else x[torch.from_numpy(pick)]
        ids[pick] = part.max(dim=1).indices.numpy()
    rows_np = np.flatnonzero(sampled)
    if rows_np.size:
        whole = rows_np.size == num_rows
        rows = torch.from_numpy(rows_np)
        sub, top_t = (x, best) if whole else (x[rows], best[rows])
        seeds_np, steps_np = seeds.numpy()[rows_np], steps.numpy()[rows_np]
        if filtered:
            pick_filters = tuple(None if f is None else (f if whole else f[rows])
                                 for f in filters)
            got = sample_filtered(sub, top_t, scale[rows_np], temperature[rows], seeds_np,
                                  steps_np, *pick_filters)
        else:
            w = weights(sub, top_t, scale[rows_np])
            got = invert_chunked(w, uniforms_np(seeds_np, steps_np, draw, 1))[:, 0]
        ids[rows_np] = got
    ids_t = torch.from_numpy(ids)
    lp = _logprob(x.float(), ids_t, torch.from_numpy(scale)) if logprobs else None
    return ids_t, lp


def sample_all(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                steps: torch.Tensor, draw: int) -> torch.Tensor | None:
    """The common batch, every row sampled without mask or filter: ids from one fused softmax
    pass, or None (some row greedy, or a row whose weights are not finite: NaN, +inf or an
    overflowing x / T, or no allowed column) for the general route."""
    num_rows, num_cols = logits.shape
    scale = sampling_scale(temperature.numpy())
    if not scale.all() or num_cols % CHUNK:
        return None
    w = softmax_weights(logits, scale)
    ids, total = invert_chunked(w, uniforms_np(seeds.numpy(), steps.numpy(), draw, 1),
                                totals=True)
    if not (np.isfinite(total) & (total > 0)).all():
        return None
    return torch.from_numpy(ids[:, 0])


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
    return (scale.astype(np.float64) * _LN2).astype(np.float32)


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


def masked(logits: torch.Tensor, bitmask: torch.Tensor, limit: int) -> torch.Tensor:
    """A float32 copy of `logits` (R, V) with the columns whose bit is clear (or >= limit) -inf.

    Each mask byte looks up its 8 columns' addends in a (256, 8) table, -0.0 where allowed (x +
    -0.0 is x, bit for bit) and -inf where banned, and one add writes the copy: about twice as
    fast as `bitmask.py`'s bitwise twin on a copy. A banned +inf or NaN logit becomes NaN,
    which the caller bans with every other NaN. (Mask bytes are read little-endian, as
    xgrammar writes them.)"""
    table = _MASK_TABLES.get(logits.device)
    if table is None:
        shifts = torch.arange(8, device=logits.device)
        bits = (torch.arange(256, device=logits.device)[:, None] >> shifts) & 1
        table = torch.where(bits.bool(), -0.0, float("-inf"))  # (256, 8)
        _MASK_TABLES[logits.device] = table
    num_rows, num_cols = logits.shape
    n = min(num_cols, limit, 32 * bitmask.shape[1])
    num_bytes = (n + 7) // 8
    mask_bytes = bitmask.contiguous().view(torch.uint8)[:, :num_bytes].long()
    addend = F.embedding(mask_bytes, table).view(num_rows, -1)[:, :n]  # (R, n)
    x = torch.empty(num_rows, num_cols, dtype=torch.float32, device=logits.device)
    torch.add(logits[:, :n], addend, out=x[:, :n])
    x[:, n:] = float("-inf")
    return x


def _logprob(x: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log softmax of x / T (T = 1 for greedy rows) at `ids` over the allowed columns."""
    y = x * torch.where(scale > 0, scale, LOG2E)[:, None] * _LN2
    lse = torch.logsumexp(y, dim=1)
    chosen = y.gather(1, ids.clamp(min=0)[:, None])[:, 0]
    return torch.where(ids >= 0, chosen - lse, float("-inf"))
