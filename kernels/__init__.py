"""thinkgate.kernels: per-step constrained-decoding work on the whole batch's logits.

Each op dispatches to its Triton kernel for CUDA tensors and to its pure-torch ``*_ref`` twin
for CPU tensors (``TRITON_INTERPRET=1`` runs the Triton path on CPU instead).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from thinkgate.kernels.backend import use_triton
from thinkgate.kernels.bitmask import (
    apply_token_bitmask_inplace_ref,
    apply_token_bitmask_inplace_triton,
    check_indices,
    check_logits_and_bitmask,
)
from thinkgate.kernels.moe import fused_moe
from thinkgate.kernels.reasoning import (
    ReasoningState,
    check_slots,
    update_reasoning_state_ref,
    update_reasoning_state_triton,
)
from thinkgate.kernels.sampler import Sampled, SamplingTensors, sample
from thinkgate.kernels.spec_accept import (
    accept_drafts_ref,
    accept_drafts_triton,
    check_accept_inputs,
)

__all__ = [
    "ReasoningState",
    "accept_drafts",
    "Sampled",
    "SamplingTensors",
    "apply_token_bitmask_inplace",
    "fused_moe",
    "sample",
    "update_reasoning_state",
]


def apply_token_bitmask_inplace(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: Sequence[int] | torch.Tensor | None = None,
    *,
    vocab_size: int | None = None,
) -> None:
    """Set logits[row, col] = -inf where the grammar bans col (see `kernels/bitmask.py`).

    xgrammar's function of this name, except that columns past the bitmask's coverage (or past
    `vocab_size`) become -inf. logits (B, V) fp32/fp16/bf16 with any row stride, bitmask
    (B, ceil(V_grammar / 32)) int32 with bit set = allowed, `indices` the rows to mask."""
    check_logits_and_bitmask(logits, bitmask)
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 0):
        raise ValueError(f"vocab_size must be a non-negative int, got {vocab_size!r}")
    num_rows = logits.shape[0] if logits.dim() == 2 else 1
    rows = check_indices(indices, num_rows, logits.device)
    if use_triton(logits):
        apply_token_bitmask_inplace_triton(logits, bitmask, rows, vocab_size)
    else:
        apply_token_bitmask_inplace_ref(logits, bitmask, rows, vocab_size)


def update_reasoning_state(
    state: ReasoningState, sampled_ids: torch.Tensor, slots: torch.Tensor | None = None
) -> None:
    """Advance every row's end-of-thinking matcher by its newly sampled id, in one launch."""
    if not isinstance(sampled_ids, torch.Tensor) or sampled_ids.dim() != 1:
        raise ValueError(f"sampled_ids must be a 1-D tensor, got {sampled_ids!r}")
    if sampled_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"sampled_ids must be int32/int64, got {sampled_ids.dtype}")
    if sampled_ids.device != state.device:
        raise ValueError(f"sampled_ids are on {sampled_ids.device}, the state on {state.device}")
    check_slots(state, sampled_ids.shape[0], slots)
    if use_triton(sampled_ids):
        update_reasoning_state_triton(state, sampled_ids, slots)
    else:
        update_reasoning_state_ref(state, sampled_ids, slots)


def accept_drafts(sampled: torch.Tensor, draft_ids: torch.Tensor, starts: torch.Tensor,
                  lens: torch.Tensor, max_len: int, *, check: bool = True) -> torch.Tensor:
    """Draft ids kept per row and the token after them, (2, B) int64 (see
    `kernels/spec_accept.py`): `sampled` and `draft_ids` (N,) over rows x positions, row r's
    positions from `starts[r]`, `lens[r]` <= `max_len` draft ids. `check=False` skips the
    argument checks (the engine's inputs are valid by construction)."""
    if check:
        check_accept_inputs(sampled, draft_ids, starts, lens, max_len)
    if use_triton(sampled):
        return accept_drafts_triton(sampled, draft_ids, starts, lens, max_len)
    return accept_drafts_ref(sampled, draft_ids, starts, lens)
