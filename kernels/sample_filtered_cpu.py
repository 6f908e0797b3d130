"""Top-k / top-p / min-p on the CPU sampling path without sorting whole rows.

`filters.logit_floor` defines the kept set S as a prefix of the row sorted by logit; sorting
32 x 8k logits costs ~20 ms on this CPU, so S is found another way, per filter (p = 2 ** ((x -
max) * scale), the maximum has p = 1):

    min-p:  p >= min_p              a bound on the logit: masked directly
    top-k:  x >= the k-th largest   `topk(k)` of the row, masked directly
    top-p:  sum(p[x > x_t]) < top_p * Z_k    for a token t (Z_k: the mass of the top-k prefix,
                                             or of the row), the rule at the first position of
                                             t's tie group, so ties are kept as the floor keeps them

Top-p is then a rejection: draw t from p (restricted by min-p and top-k) by the inverted CDF,
keep it if top-p keeps it, else draw again with the row's next uniform; that samples exactly
p | S, and a try succeeds with probability p(S) >= top_p. Rows still drawing after `MAX_DRAWS`
tries take the exact floor (`logit_floor_sparse`) and one last draw. A row's draws depend only
on its (seed, step).
"""

from __future__ import annotations

import math

import torch
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.inverse_cdf import invert_cdf, uniform_cpu

MAX_DRAWS = 6


def sample_filtered(
    x: torch.Tensor,
    best: torch.Tensor,
    scale: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    min_p: torch.Tensor | None,
) -> torch.Tensor:
    """(R,) ids for sampled rows `x` (R, V) fp32 (ours to modify; -inf where banned; each row's
    max `best` is finite), `scale` = log2(e) / T > 0."""
    num_rows, num_cols = x.shape
    k = None if top_k is None else torch.where(top_k > 0, top_k.long(), num_cols)
    if min_p is not None:  # p >= min_p  <=>  x >= max + log2(min_p) / scale
        bound = torch.log2(min_p.float().clamp(min=1e-45)) / scale
        x.masked_fill_(x < (best + torch.where(min_p > 0, bound, -math.inf))[:, None], -math.inf)
    k_floor = None
    if k is not None and bool((k < num_cols).any()):
        width = int(k.clamp(max=num_cols).max())
        k_floor = x.topk(width, dim=1).values.gather(1, (k.clamp(max=width) - 1)[:, None])
        k_floor = torch.where(k[:, None] < num_cols, k_floor, -math.inf)  # (R, 1)
    p = (x - best[:, None]).mul_(scale[:, None]).exp2_()  # (R, V)
    if top_p is None or not bool((top_p < 1).any()):
        if k_floor is not None:
            p.masked_fill_(x < k_floor, 0.0)
        return invert_cdf(p.cumsum_(dim=1), uniform_cpu(seeds, steps))
    norm = None
    if k_floor is not None:  # the first k positions' mass: ties at the k-th value count once each
        above = x > k_floor
        count = above.sum(dim=1)
        p_floor = p.gather(1, (x == k_floor).to(torch.int8).argmax(dim=1)[:, None])[:, 0]
        inside = torch.where(above, p, 0.0).sum(dim=1) + (k - count).clamp(min=0) * p_floor
        norm = inside
        p.masked_fill_(x < k_floor, 0.0)
    cdf = p.cumsum(dim=1)
    norm = cdf[:, -1] if norm is None else torch.where(k < num_cols, inside, cdf[:, -1])
    ids = torch.full((num_rows,), -1, dtype=torch.int64)
    pending = torch.arange(num_rows)
    xs, ps, cs, ns, tp = x, p, cdf, norm, top_p.float()
    for draw in range(MAX_DRAWS):
        t = invert_cdf(cs, uniform_cpu(seeds[pending], steps[pending], draw))
        mass = torch.where(xs > xs.gather(1, t[:, None]), ps, 0.0).sum(dim=1)
        ok = (mass < tp * ns) | (tp >= 1)
        ids[pending[ok]] = t[ok]
        if bool(ok.all()):
            return ids
        miss = (~ok).nonzero()[:, 0]
        pending = pending[miss]
        xs, ps, cs, ns, tp = xs[miss], ps[miss], cs[miss], ns[miss], tp[miss]
    rest = x[pending]
    if k_floor is not None:
        rest.masked_fill_(rest < k_floor[pending], -math.inf)
    pick = None if top_p is None else top_p[pending]
    floor = logit_floor_sparse(rest, temperature[pending], None, pick, None)
    rest.masked_fill_(rest < floor[:, None], -math.inf)
    q = rest.sub_(best[pending, None]).mul_(scale[pending, None]).exp2_().cumsum_(dim=1)
    ids[pending] = invert_cdf(q, uniform_cpu(seeds[pending], steps[pending], MAX_DRAWS))
    return ids
