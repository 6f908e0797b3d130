"""Top-k / top-p / min-p on the CPU sampling path without sorting whole rows.

`filters.logit_floor` defines the kept set S as a prefix of the row sorted by logit, and
sorting 32 x 8k logits costs ~20 ms on this CPU. With p = 2 ** ((x - max) * scale) (the maximum
has p = 1) each sampled row takes one of three routes:

- top-k rows (k <= `MAX_TOP_K`): S lies inside the row's `topk(k)`, which comes sorted, so the
  floor rule runs on those k candidates (top-p normalised over them, min-p against p = 1) and
  the draw inverts the CDF over the kept candidates;
- rows without top-k: min-p is a bound on the logit (p >= min_p), masked directly, and top-p is
  a rejection: draw t from p by the inverted CDF and keep it when sum(p[x > x_t]) < top_p * Z
  (Z: the whole row's mass), which is the floor rule at the first position of t's tie group;
  else draw again with the row's next uniform. That samples exactly p | S, and a try succeeds
  with probability p(S) >= top_p;
- rows still drawing after `MAX_DRAWS` tries, rows with k > `MAX_TOP_K`, and rows whose k-th
  logit ties with the next one take the exact floor (`logit_floor_sparse`) and one last draw.

A row's draws depend only on its (seed, step).
"""

from __future__ import annotations

import math

import torch
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.inverse_cdf import invert_cdf, uniform_cpu

MAX_DRAWS = 6
MAX_TOP_K = 1024


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
    """(R,) ids for sampled rows `x` (R, V) fp32 (-inf where banned; each row's max `best` is
    finite), `scale` = log2(e) / T > 0."""
    num_rows, num_cols = x.shape
    filters = (top_k, top_p, min_p)
    k = (torch.full((num_rows,), num_cols, dtype=torch.int64) if top_k is None
         else torch.where(top_k > 0, top_k.long(), num_cols).clamp(max=num_cols))
    ids = torch.full((num_rows,), -1, dtype=torch.int64)
    exact = torch.zeros(num_rows, dtype=torch.bool)
    routes = ((k < num_cols) & (k <= MAX_TOP_K), k == num_cols)
    for route, rows in zip((_top_k_candidates, _rejection), (r.nonzero()[:, 0] for r in routes)):
        if rows.numel() == 0:
            continue
        pick = [None if f is None else f[rows] for f in filters]
        got = route(x[rows], best[rows], scale[rows], seeds[rows], steps[rows], k[rows], *pick)
        ids[rows] = got
        exact[rows[got == -2]] = True
    exact |= (k < num_cols) & (k > MAX_TOP_K)
    if bool(exact.any()):
        rows = exact.nonzero()[:, 0]
        rest = x[rows]
        floor = logit_floor_sparse(rest, temperature[rows], *[None if f is None else f[rows]
                                                              for f in filters])
        rest.masked_fill_(rest < floor[:, None], -math.inf)
        q = rest.sub_(best[rows, None]).mul_(scale[rows, None]).exp2_().cumsum_(dim=1)
        ids[rows] = invert_cdf(q, uniform_cpu(seeds[rows], steps[rows], MAX_DRAWS))
    return ids


def _top_k_candidates(x: torch.Tensor, best: torch.Tensor, scale: torch.Tensor,
                      seeds: torch.Tensor, steps: torch.Tensor, k: torch.Tensor,
                      top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                      min_p: torch.Tensor | None) -> torch.Tensor:
    """The floor rule on each row's k largest logits; -2 where the k-th logit ties the next."""
    num_cols = x.shape[1]
    width = min(int(k.max()) + 1, num_cols)
    vals, cols = x.topk(width, dim=1)  # (R, width), descending
    position = torch.arange(width)[None, :]
    in_k = position < k[:, None]
    q = (vals - best[:, None]).mul_(scale[:, None]).exp2_()  # p of each candidate
    keep = in_k.clone()
    if top_p is not None:
        kept = q * in_k
        kept = kept / kept.sum(dim=1, keepdim=True).clamp(min=1e-30)
        before = kept.cumsum(dim=1) - kept
        keep &= (before < top_p.float()[:, None]) | (top_p >= 1)[:, None]
    if min_p is not None:
        keep &= q >= min_p.float().clamp(min=0)[:, None]
    keep[:, 0] = True
    floor = vals.gather(1, keep.sum(dim=1, keepdim=True) - 1)  # (R, 1)
    weights = torch.where(in_k & (vals >= floor), q, 0.0)
    at = invert_cdf(weights.cumsum_(dim=1), uniform_cpu(seeds, steps))
    ids = cols.gather(1, at[:, None])[:, 0]
    nxt = vals.gather(1, k.clamp(max=width - 1)[:, None])[:, 0]
    ties = (k < width) & (nxt == floor[:, 0]) & (nxt > -math.inf)  # S may go past the k
    return torch.where(ties, -2, ids)


def _rejection(x: torch.Tensor, best: torch.Tensor, scale: torch.Tensor, seeds: torch.Tensor,
               steps: torch.Tensor, k: torch.Tensor, top_k: torch.Tensor | None,
               top_p: torch.Tensor | None, min_p: torch.Tensor | None) -> torch.Tensor:
    """Rows without top-k: min-p masked, top-p by rejection; -2 after `MAX_DRAWS` misses."""
    p = (x - best[:, None]).mul_(scale[:, None]).exp2_()  # (R, V)
    norm = p.sum(dim=1)  # top-p is normalised over the whole row, before min-p
    if min_p is not None:  # p >= min_p  <=>  x >= max + log2(min_p) / scale
        p.masked_fill_(p < min_p.float()[:, None], 0.0)
    cdf = p.cumsum(dim=1)
    if top_p is None or not bool((top_p < 1).any()):
        return invert_cdf(cdf, uniform_cpu(seeds, steps))
    ids = torch.full((x.shape[0],), -2, dtype=torch.int64)
    pending = torch.arange(x.shape[0])
    xs, ps, cs, ns, tp = x, p, cdf, norm, top_p.float()
    for draw in range(MAX_DRAWS):
        t = invert_cdf(cs, uniform_cpu(seeds[pending], steps[pending], draw))
        mass = torch.where(xs > xs.gather(1, t[:, None]), ps, 0.0).sum(dim=1)
        ok = (mass < tp * ns) | (tp >= 1)
        ids[pending[ok]] = t[ok]
        if bool(ok.all()):
            break
        miss = (~ok).nonzero()[:, 0]
        pending = pending[miss]
        xs, ps, cs, ns, tp = xs[miss], ps[miss], cs[miss], ns[miss], tp[miss]
    return ids
