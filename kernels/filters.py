"""top-k / top-p / min-p as a per-row logit floor for the fused sampler (the second path).

Each filter keeps a prefix of the allowed tokens sorted by logit, so together they reduce to one
number per row: the smallest kept logit. The fused kernel then bans ``logits < floor`` and samples
the renormalised distribution over what is left, which is exactly "filter, then sample"::

    p = softmax(sorted allowed logits / T)                  # descending
    keep[i] = i < top_k                                      # top_k <= 0: off
          and sum(p[:i] restricted to top-k, renormalised) < top_p  # top_p >= 1: off
          and p[i] >= min_p * p[0]                           # min_p <= 0: off
    floor = sorted_logits[last kept i]; -inf for greedy rows

Ties at the floor keep every token equal to it. This path sorts each row (torch, any device, no
host sync); batches without these filters skip it.
"""

from __future__ import annotations

import torch


def logit_floor(
    logits: torch.Tensor,
    allowed: torch.Tensor | None,
    temperature: torch.Tensor,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B,) fp32 floor; `allowed` (B, V) bool is the gated grammar mask (None: `logits` already
    holds -inf wherever a column is banned)."""
    num_rows, num_cols = logits.shape
    x = logits.float() if allowed is None else logits.float().masked_fill(~allowed, float("-inf"))
    sorted_x = x.sort(dim=1, descending=True).values
    t = temperature.float()
    greedy = t <= 0
    probs = torch.softmax(sorted_x / torch.where(greedy, 1.0, t)[:, None], dim=1)
    probs = torch.nan_to_num(probs, nan=0.0)
    floor = _floor_of_prefix(sorted_x, probs, None, top_k, top_p, min_p)
    return torch.where(greedy, float("-inf"), floor)


def _floor_of_prefix(
    sorted_x: torch.Tensor,
    probs: torch.Tensor,
    mass: torch.Tensor | None,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    min_p: torch.Tensor | None,
) -> torch.Tensor:
    """The rule above on a descending prefix (B, K) of each row and its probabilities; `mass`
    (B,) is the probability of the whole row (None: the prefix is the whole row)."""
    num_rows, num_cols = sorted_x.shape
    position = torch.arange(num_cols, device=sorted_x.device)[None, :]
    keep = torch.ones(num_rows, num_cols, dtype=torch.bool, device=sorted_x.device)
    if top_k is not None:
        k = torch.where(top_k > 0, top_k.long(), num_cols)
        keep &= position < k[:, None]
    if top_p is not None:
        kept = probs * keep
        total = kept.sum(dim=1)
        if mass is not None and top_k is not None:  # a top-k row's mass is inside the prefix
            total = torch.where(top_k > 0, total, mass)
        elif mass is not None:
            total = mass
        kept = kept / total.clamp(min=1e-30)[:, None]
        before = kept.cumsum(dim=1) - kept
        keep &= (before < top_p.float()[:, None]) | (top_p.float() >= 1)[:, None]
    if min_p is not None:
        keep &= probs >= min_p.float().clamp(min=0)[:, None] * probs[:, :1]
    keep[:, 0] = True
    last = keep.sum(dim=1, keepdim=True) - 1
    return sorted_x.gather(1, last)[:, 0]


def logit_floor_sparse(
    x: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    max_candidates: int = 2048,
) -> torch.Tensor:
    """`logit_floor(x, None, ...)` without sorting whole rows (a CPU sort of 32 x 8k logits
    takes ~20 ms here): only the candidates that can hold the floor are sorted.

    With p = exp((x - max) / T) and Z = sum(p), the token where top-p's running mass crosses
    has p >= (1 - top_p) * Z / V (the tokens below that carry less than 1 - top_p of the mass),
    a min-p survivor has p >= min_p, and top-k needs the k largest: each row's candidates are
    the tokens above such a threshold (lowered until top-k has k of them). Rows with more than
    `max_candidates` fall back to the full sort. `x` holds -inf wherever a column is banned."""
    num_rows, num_cols = x.shape
    t = temperature.float()
    on = torch.zeros(num_rows, dtype=torch.bool, device=x.device)
    for f, off in ((top_k, lambda v: v <= 0), (top_p, lambda v: v >= 1), (min_p, lambda v: v <= 0)):
        if f is not None:
            on |= ~off(f)
    active = (t > 0) & on
    floor = torch.full((num_rows,), float("-inf"), device=x.device)
    best = x.max(dim=1).values
    active &= best > float("-inf")
    rows = active.nonzero()[:, 0]
    if rows.numel() == 0:
        return floor
    sub = x[rows]
    pick = [None if f is None else f[rows] for f in (top_k, top_p, min_p)]
    sub_k, sub_p, sub_min = pick
    temp, top = t[rows], best[rows]
    mass = ((sub - top[:, None]) / temp[:, None]).exp_().sum(dim=1)  # 1 at the max, 0 if banned
    tau = torch.zeros(rows.numel(), device=x.device)
    if sub_p is not None:
        tau = torch.maximum(tau, (1 - sub_p.float()).clamp(min=0) * mass / num_cols)
    if sub_min is not None:
        tau = torch.maximum(tau, sub_min.float().clamp(min=0))
    # p >= tau  <=>  x >= max + T * ln(tau): thresholds on the logits keep underflowed tokens
    gap = torch.where(tau > 0, -torch.log(tau.clamp(min=1e-30)) * temp, 0.0).clamp(min=1.0)
    theta = torch.where(tau > 0, top - gap, float("-inf"))
    if sub_k is not None:
        need = torch.where(sub_k > 0, sub_k.long(), 0).clamp(max=num_cols)
        theta = torch.where((need > 0) & (tau <= 0), top - gap, theta)
    count = (sub >= theta[:, None]).sum(dim=1)
    if sub_k is not None:
        allowed = (sub > float("-inf")).sum(dim=1)
        for _ in range(8):  # widen a top-k row's window until it holds k tokens (or all)
            short = (count < need) & (count < allowed)
            if not bool(short.any()):
                break
            gap = torch.where(short, gap * 4, gap)
            theta = torch.where(short, top - gap, theta)
            count = (sub >= theta[:, None]).sum(dim=1)
        if bool(((count < need) & (count < allowed)).any()):
            return logit_floor(x, None, temperature, top_k, top_p, min_p)
    width = int(count.max())
    if width > max_candidates:
        return logit_floor(x, None, temperature, top_k, top_p, min_p)
    cand = sub >= theta[:, None]
    at = cand.nonzero()  # (N, 2) row-major: each row's candidates in column order
    slot = cand.to(torch.int32).cumsum_(dim=1)[at[:, 0], at[:, 1]].long() - 1
    prefix = torch.full((rows.numel(), width), float("-inf"), device=x.device)
    prefix[at[:, 0], slot] = sub[at[:, 0], at[:, 1]]
    prefix = prefix.sort(dim=1, descending=True).values  # (R, width), small
    probs = ((prefix - top[:, None]) / temp[:, None]).exp() / mass[:, None]
    floor[rows] = _floor_of_prefix(prefix, probs, torch.ones_like(mass), sub_k, sub_p, sub_min)
    return floor
