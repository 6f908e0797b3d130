"""The CPU path's dense route: each row masked in a float32 copy, then greedy or one draw.

Greedy rows take the first maximal allowed column; sampled rows invert the CDF of
softmax(x / T) over the allowed columns with one `uniform_cpu` draw (see sample_cpu.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.inverse_cdf import invert_cdf, uniform_cpu
from thinkgate.kernels.sample_filtered_cpu import sample_filtered
from thinkgate.kernels.sampling import LOG2E, temperature_scale

_LN2 = 0.6931471805599453
_MASK_TABLES: dict[torch.device, torch.Tensor] = {}


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
    the first maximal column, sampled rows invert their CDF with `uniform_cpu(..., draw)`."""
    num_rows = logits.shape[0]
    rows = use.nonzero()[:, 0] if bitmask is not None and use is not None else None
    if rows is not None and rows.numel() == num_rows:
        x = masked(logits, bitmask, limit)  # (B, V), ours
    else:
        x = logits.to(torch.float32, copy=True)  # (B, V), masked in place below
        if rows is not None and rows.numel():
            x.index_copy_(0, rows, masked(x.index_select(0, rows), bitmask[rows], limit))
    best, ids = x.max(dim=1)  # the first maximal column: the greedy id
    if bool(torch.isnan(best).any()):  # NaN is never allowed; only then pay for the rewrite
        x.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
        best, ids = x.max(dim=1)
    filtered = any(f is not None for f in filters)
    if filtered and logprobs:  # the logprob's normaliser needs the floor itself
        floor = logit_floor_sparse(x, temperature, *filters)
        x.masked_fill_(x < floor[:, None], float("-inf"))
        filtered = False
    scale = temperature_scale(temperature)
    live = best > float("-inf")
    ids = torch.where(live, ids, -1)
    sampled = (scale > 0) & live & (best < float("inf"))
    rows = sampled.nonzero()[:, 0]
    if rows.numel() and filtered:
        pick = tuple(None if f is None else f[rows] for f in filters)
        whole = rows.numel() == num_rows  # x is ours: filter it in place
        ids[rows] = sample_filtered(x if whole else x[rows], best[rows], scale[rows],
                                    temperature[rows], seeds[rows], steps[rows], *pick)
    elif rows.numel():
        whole = rows.numel() == num_rows and not logprobs  # x is ours: sample it in place
        ids[rows] = _invert_cdf(x if whole else x[rows], best[rows], scale[rows],
                                uniform_cpu(seeds[rows], steps[rows], draw))
    lp = _logprob(x, ids, scale) if logprobs else None
    return ids, lp


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


def _invert_cdf(
    x: torch.Tensor, best: torch.Tensor, scale: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """Sample each row of `x` (R, V) from softmax(x * scale * ln 2) by one uniform per row."""
    p = x.sub_(best[:, None]).mul_(scale[:, None]).exp2_()  # (R, V); banned -> 0, best -> 1
    return invert_cdf(p.cumsum_(dim=1), u)


def _logprob(x: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log softmax of x / T (T = 1 for greedy rows) at `ids` over the allowed columns."""
    y = x * torch.where(scale > 0, scale, LOG2E)[:, None] * _LN2
    lse = torch.logsumexp(y, dim=1)
    chosen = y.gather(1, ids.clamp(min=0)[:, None])[:, 0]
    return torch.where(ids >= 0, chosen - lse, float("-inf"))
