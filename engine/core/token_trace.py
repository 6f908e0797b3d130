"""The token trace: what the constrained decoder did at each token of a request that asks for it.

`SamplingParams(token_trace=True)` gives the request's sequences a trace list; each token they
sample appends one `TraceEntry`:

    (token_id, masked, num_allowed, thinking, forced, ended_thinking)

    masked          the grammar's bitmask applied to this token's logits
    num_allowed     ids the bitmask allowed (None when no mask applied)
    thinking        the row was still thinking when the token was sampled (the gate's state
                    before the step; False for rows without a reasoning parser)
    forced          a spent thinking_token_budget forced this id (the end marker)
    ended_thinking  this token completed the end marker: the gate switched to answering here

Jump-forward ids (engine/structured/jump_forward.py) are traced as masked with one allowed id: the grammar
left only that text.

The engine calls `trace_before` after the mask is filled and before sampling, and `trace_after`
once the gate's new state is read back, and only while some request is traced
(`LLMEngine.num_traced_requests`); nothing is computed, copied or sent for untraced requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.structured_output import GateInputs
from thinkgate.kernels.bitmask import unpack_bitmask_ref
from thinkgate.kernels.reasoning import reasoning_gate_ref

TraceEntry = tuple[int, bool, int | None, bool, bool, bool]


@dataclass
class PendingTrace:
    """The traced rows of one step, as they stood before sampling."""

    rows: list[int]
    masked: list[bool]
    num_allowed: list[int | None]
    thinking: list[bool]
    forced: list[bool]


def trace_before(seqs: list[Sequence], gate: GateInputs | None,
                 vocab_size: int) -> PendingTrace | None:
    """The traced rows' mask and gate state for this step; None when no row is traced."""
    rows = [i for i, seq in enumerate(seqs) if seq.trace is not None]
    if not rows:
        return None
    masked = [_masked(seqs[i], gate) for i in rows]
    num_allowed: list[int | None] = [None] * len(rows)
    masked_rows = [j for j, m in enumerate(masked) if m]
    if masked_rows and gate is not None and gate.bitmask is not None:
        index = torch.tensor([rows[j] for j in masked_rows], device=gate.bitmask.device)
        counts = unpack_bitmask_ref(gate.bitmask[index], vocab_size, vocab_size).sum(1).tolist()
        for j, count in zip(masked_rows, counts):
            num_allowed[j] = int(count)
    thinking = [_thinking(seqs[i]) for i in rows]
    forced = [False] * len(rows)
    budgeted = [j for j in range(len(rows))
                if thinking[j] and seqs[rows[j]].reasoning_state.budget is not None]
    if budgeted and gate is not None and gate.reasoning is not None and gate.slots is not None:
        index = torch.tensor([rows[j] for j in budgeted], device=gate.slots.device)
        _, forced_rows, _ = reasoning_gate_ref(gate.reasoning, gate.slots[index])
        for j, hit in zip(budgeted, forced_rows.tolist()):
            forced[j] = bool(hit)
    return PendingTrace(rows, masked, num_allowed, thinking, forced)


def trace_after(pending: PendingTrace, seqs: list[Sequence], token_ids: list[int]) -> None:
    """Append each traced row's entry for the id it sampled (after the gate's read-back)."""
    for j, i in enumerate(pending.rows):
        token = token_ids[i]
        if token < 0:  # no allowed token: the row ends without a new one
            continue
        seq = seqs[i]
        ended = pending.thinking[j] and not _thinking(seq)
        seq.trace.append((token, pending.masked[j], pending.num_allowed[j], pending.thinking[j],
                          pending.forced[j], ended))


def _masked(seq: Sequence, gate: GateInputs | None) -> bool:
    row = seq.structured_state
    return (gate is not None and gate.bitmask is not None and row is not None
            and bool(getattr(row, "constrained", False)))


def _thinking(seq: Sequence) -> bool:
    gate = seq.reasoning_state
    return gate is not None and not gate.answering
