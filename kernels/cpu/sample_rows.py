"""The CPU path's dense route: each row under its mask, then greedy or one draw.

Greedy rows take the first maximal allowed column; sampled rows invert the CDF of
softmax(x / T) over the allowed columns with one `uniform_cpu` draw (see sample.py). An
unmasked batch is read in place: the row maxima (a reduction), then ONE pass writes each row's
weights ``2 ** ((x - max) * log2(e) / T)`` into a reused workspace, whose 64-column chunk sums
place the draw (`inverse_cdf.invert_chunked`); the argmax runs only on greedy rows.
"""

from __future__ import annotations

import numpy as np
import torch
from thinkgate.kernels.bitmask import apply_token_bitmask_inplace_ref
from thinkgate.kernels.cpu.inverse_cdf import CHUNK, invert_chunked, uniforms_np
from thinkgate.kernels.cpu.sample_filtered import sample_filtered
from thinkgate.kernels.cpu.weights import LN2, sampling_scale, softmax_weights, weights
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.sampling import LOG2E


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


def masked(logits: torch.Tensor, bitmask: torch.Tensor, limit: int) -> torch.Tensor:
    """A float32 copy of `logits` (R, V) under the grammar's mask: exactly the kernels' rule,
    `bitmask.apply_token_bitmask_inplace_ref` with `vocab_size=limit` (bit clear or column >=
    limit: -inf; allowed logits kept bit for bit), so masking is written once."""
    x = logits.to(torch.float32, copy=True)  # (R, V)
    apply_token_bitmask_inplace_ref(x, bitmask, vocab_size=limit)
    return x


def _logprob(x: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log softmax of x / T (T = 1 for greedy rows) at `ids` over the allowed columns."""
    y = x * torch.where(scale > 0, scale, LOG2E)[:, None] * LN2
    lse = torch.logsumexp(y, dim=1)
    chosen = y.gather(1, ids.clamp(min=0)[:, None])[:, 0]
    return torch.where(ids >= 0, chosen - lse, float("-inf"))
