"""The hook through which grammars and the reasoning gate (issue 7) plug into the step loop.

The engine calls, per request and per step:

    hook.prefetch(params)            when a request arrives: start compiling its grammar off
                                     the step loop; a Future (its exception: a bad grammar),
                                     or None when nothing needs compiling; ValueError at once
                                     for a constraint that fails the checks before compiling
    hook.add_request(seq)            when a sequence is created (its grammar compiled); raise
                                     ValueError to reject a bad request (only it fails)
    handle = hook.start_fill(seqs)   right before the forward: start filling the batch's
                                     bitmask on the CPU (e.g. in a worker thread) so it overlaps
    inputs = hook.finish_fill(handle)   after the forward: the `GateInputs` the sampler passes
                                     to `kernels.sample`, or None when no row is constrained
    hook.accept(seqs, token_ids, reasoning)   after sampling: advance each row's matcher
                                     (`reasoning`: the (thinking, num_reasoning_tokens,
                                     progress, start_id) of each row's slot after the step,
                                     read back with the ids); to end
                                     a row set `seq.force_finish = ("stop", None)` (grammar done)
                                     or ("abort", message) (matcher rejected a token)
    hook.jumps(seq, with_logprobs)   whether jump_forward writes the row's forced text (a
                                     speculative draft stops before it: engine/speculative.py)
    hook.jump_forward(seqs, with_logprobs)   after the step's tokens are appended: give each
                                     unfinished row the ids its grammar forces next
                                     (`seq.forced_ids`, see jump_forward.py); rows that
                                     want logprobs only when `with_logprobs`
    hook.preempt(seq)                when the scheduler preempts a sequence (recompute later)
    hook.remove(seq)                 when a sequence finishes or is aborted

Per-request state lives in `seq.structured_state` (and `seq.reasoning_state` for the gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from thinkgate.engine.sequence import Sequence
from thinkgate.kernels import ReasoningState


@dataclass
class GateInputs:
    """One step's constraint inputs, all for `kernels.sample` except the banned ids."""

    bitmask: torch.Tensor | None = None  # (B, W) int32 on the logits' device
    grammar_rows: torch.Tensor | None = None  # (B,) bool: rows whose bitmask row is a grammar's
    reasoning: ReasoningState | None = None  # the device gate; advanced after sampling
    slots: torch.Tensor | None = None  # (B,) int32: batch row -> reasoning-state slot
    banned_rows: list[int] = field(default_factory=list)  # rows that may not sample banned_ids
    banned_ids: list[int] = field(default_factory=list)

    def is_empty(self) -> bool:
        """Nothing for the sampler to apply: no mask, no reasoning gate, no banned ids."""
        return self.bitmask is None and self.reasoning is None and not self.banned_rows


class StructuredOutputHook:
    """The default: no grammar backend, so a request asking for structured output is rejected."""

    def add_request(self, seq: Sequence) -> None:
        if seq.params.structured_outputs is not None:
            raise ValueError(
                "structured_outputs needs a grammar backend, and this engine has none installed"
            )

    def prefetch(self, params: Any) -> Any:
        return None

    def stats(self) -> dict[str, int]:
        """Counters for /metrics (constraints compiled per backend, compile-cache size)."""
        return {}

    def start_fill(self, seqs: list[Sequence]) -> Any:
        return None

    def finish_fill(self, handle: Any) -> GateInputs | None:
        return None

    def accept(self, seqs: list[Sequence], token_ids: list[int],
               reasoning: tuple[list[int], ...] | None = None) -> None:
        return None

    def jump_forward(self, seqs: list[Sequence], with_logprobs: bool = True) -> None:
        return None

    def jumps(self, seq: Sequence, with_logprobs: bool = True) -> bool:
        """Whether `jump_forward` writes the text this row's grammar forces next."""
        return False

    def preempt(self, seq: Sequence) -> None:
        return None

    def remove(self, seq: Sequence) -> None:
        return None
