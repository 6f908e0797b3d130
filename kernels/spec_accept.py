"""Speculative decoding's acceptance: how many draft ids each row keeps, and its next token.

A verify step samples every position of every row under that position's own grammar mask
(`kernels.sample` over the (N, V) logits with an (N, W) bitmask: rows x draft positions in one
launch). Row r's positions are `starts[r] .. starts[r] + lens[r]`: its last token, then one after
each of its `lens[r]` draft ids. `draft_ids` is laid out the same way (N,): at a row's position j
< lens[r] the draft id that position's sample is compared with, anything (-1) at its last one::

    for r in range(B):                                  # accept_drafts(sampled, draft_ids,
        s, k = starts[r], lens[r]                       #               starts, lens)
        kept = 0
        while kept < k and sampled[s + kept] == draft_ids[s + kept]:
            kept += 1
        accepted[r] = kept                              # draft ids kept
        next_ids[r] = sampled[s + kept]                 # the sample after them

A kept id is exactly the token the row samples there, so `accepted` and `next_ids` are the
tokens plain decoding gives (engine/core/speculative.py). Returns one (2, B) int64 tensor
(accepted, next ids), so the step reads both back in one transfer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def accept_drafts_host(sampled: list[int], draft_ids: list[int], starts: list[int],
                       lens: list[int]) -> tuple[list[int], list[int]]:
    """The loop above on host lists: (accepted, next ids). The engine's CPU path, where the
    ids are on the host already: ~1-2 us a step against ~20 us for the twin's torch calls
    (batch 1-8, 1-4 draft ids, one thread)."""
    accepted, next_ids = [], []
    for start, k in zip(starts, lens):
        kept = 0
        while kept < k and sampled[start + kept] == draft_ids[start + kept]:
            kept += 1
        accepted.append(kept)
        next_ids.append(sampled[start + kept])
    return accepted, next_ids


def accept_drafts_ref(sampled: torch.Tensor, draft_ids: torch.Tensor, starts: torch.Tensor,
                      lens: torch.Tensor) -> torch.Tensor:
    """The twin: (2, B) int64 (accepted, next ids), one pass over rows x positions."""
    num_rows = starts.shape[0]
    if num_rows == 0:
        return torch.empty((2, 0), dtype=torch.int64, device=sampled.device)
    width = int(lens.max()) + 1
    cols = torch.arange(width, device=sampled.device)
    at = (starts[:, None] + cols).clamp_(max=sampled.shape[0] - 1)  # (B, K + 1)
    miss = (sampled[at] != draft_ids[at]) | (cols >= lens[:, None])
    accepted = miss.to(torch.int8).argmax(dim=1)  # the first miss (always one: col lens[r])
    return torch.stack((accepted, sampled[starts + accepted]))


@triton.jit
def _accept_drafts_kernel(sampled_ptr, draft_ptr, starts_ptr, lens_ptr, out_ptr, num_rows,
                          MAX_LEN: tl.constexpr):
    row = tl.program_id(0)
    start = tl.load(starts_ptr + row).to(tl.int64)
    k = tl.load(lens_ptr + row).to(tl.int64)
    kept = tl.zeros((), dtype=tl.int64)
    alive = tl.full((), 1, dtype=tl.int1)
    for j in tl.static_range(MAX_LEN):
        inside = alive & (j < k)
        got = tl.load(sampled_ptr + start + j, mask=inside, other=-1)
        want = tl.load(draft_ptr + start + j, mask=inside, other=-2)
        alive = inside & (got == want)
        kept += alive.to(tl.int64)
    tl.store(out_ptr + row, kept)
    tl.store(out_ptr + num_rows + row, tl.load(sampled_ptr + start + kept))


def accept_drafts_triton(sampled: torch.Tensor, draft_ids: torch.Tensor, starts: torch.Tensor,
                         lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """The kernel: one program per row; `max_len` >= every lens[r] (a constexpr: the draft
    width, `num_speculative_tokens`)."""
    num_rows = starts.shape[0]
    out = torch.empty((2, num_rows), dtype=torch.int64, device=sampled.device)
    if num_rows:
        _accept_drafts_kernel[(num_rows,)](sampled, draft_ids, starts, lens, out, num_rows,
                                           MAX_LEN=max(max_len, 1))
    return out


def check_accept_inputs(sampled: torch.Tensor, draft_ids: torch.Tensor, starts: torch.Tensor,
                        lens: torch.Tensor, max_len: int) -> None:
    """ValueError naming the value for inputs the kernel would read out of bounds."""
    for name, t in (("sampled", sampled), ("draft_ids", draft_ids), ("starts", starts),
                    ("lens", lens)):
        if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name} must be a 1-D int32/int64 tensor, got {t.dim()}-D "
                             f"{t.dtype}")
        if t.device != sampled.device:
            raise ValueError(f"{name} is on {t.device}, sampled on {sampled.device}")
    if draft_ids.shape != sampled.shape:
        raise ValueError(f"draft_ids has shape {tuple(draft_ids.shape)}, sampled "
                         f"{tuple(sampled.shape)}")
    if starts.shape != lens.shape:
        raise ValueError(f"starts has {starts.shape[0]} rows, lens {lens.shape[0]}")
    if starts.numel():
        ends = starts + lens
        if int(lens.min()) < 0 or int(lens.max()) > max_len:
            raise ValueError(f"lens must be in [0, max_len={max_len}], got {lens.tolist()}")
        if int(starts.min()) < 0 or int(ends.max()) >= sampled.shape[0]:
            raise ValueError(f"a row's positions run past the {sampled.shape[0]} samples: "
                             f"starts {starts.tolist()}, lens {lens.tolist()}")
