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
    position = torch.arange(num_cols, device=logits.device)[None, :]
    keep = torch.ones(num_rows, num_cols, dtype=torch.bool, device=logits.device)
    if top_k is not None:
        k = torch.where(top_k > 0, top_k.long(), num_cols)
        keep &= position < k[:, None]
    if top_p is not None:
        kept = probs * keep
        kept = kept / kept.sum(dim=1, keepdim=True).clamp(min=1e-30)
        before = kept.cumsum(dim=1) - kept
        keep &= (before < top_p.float()[:, None]) | (top_p.float() >= 1)[:, None]
    if min_p is not None:
        keep &= probs >= min_p.float().clamp(min=0)[:, None] * probs[:, :1]
    keep[:, 0] = True
    last = keep.sum(dim=1, keepdim=True) - 1
    floor = sorted_x.gather(1, last)[:, 0]
    return torch.where(greedy, float("-inf"), floor)
