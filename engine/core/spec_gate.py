"""The reasoning gate in a speculative verify step (speculative.py): rows that still think draft
too, and the gate advances over the ids each row keeps.

A thinking row's draft is cut, when proposed, before its first end-marker id and before the
point where its thinking budget would force the marker (`RowGate.draft_room`). So at every
position the verify pass samples for that row, the row still thinks and nothing is forced: the
gate of each of its positions is the one its slot holds at the start of the step. The step's
gate is spread over the positions (`spread_gate`: each position reads its row's slot, a banned
row's positions all ban its ids), and the sampler applies it as in a plain step: no grammar
while thinking (unless the constraint applies in reasoning: then its masks along the draft),
and the budget's forced id on a row whose budget is spent (such a row has no draft).

After acceptance, `advance_gate` writes into each thinking row's slot what its kept ids did
(they hold no marker id: the count grows by those after the start marker, the marker match is
back at 0, the awaited start marker may be written), on the host mirror (`RowGate.skip`) and
then the device slot in one copy; `kernels.update_reasoning_state` then advances every slot by
the row's sampled id, which may end thinking, and the slots are read back as in a plain step.
"""

from __future__ import annotations

import torch
from thinkgate.engine.core.sampler import advance_reasoning
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.structured_output import GateInputs


def spread_gate(gate: GateInputs, wide: GateInputs | None, starts: list[int],
                spans: list[int]) -> GateInputs:
    """The gate of a verify step's N positions: `wide`'s (N, W) bitmask and grammar rows (or
    none), the step's reasoning state with each position on its row's slot, and the banned ids
    on every position of a banned row."""
    out = wide if wide is not None else GateInputs()
    if gate.reasoning is not None and gate.slots is not None:
        rows = [row for row, span in enumerate(spans) for _ in range(span)]
        out.reasoning = gate.reasoning
        out.slots = gate.slots[torch.tensor(rows).to(gate.slots.device, non_blocking=True)]
    if gate.banned_rows:
        out.banned_rows = [p for row in gate.banned_rows
                           for p in range(starts[row], starts[row] + spans[row])]
        out.banned_ids = gate.banned_ids
    return out


def advance_gate(gate: GateInputs, seqs: list[Sequence], accepted: list[int],
                 token_ids: list[int]) -> tuple[list[int], tuple[list[int], ...] | None]:
    """Each row's slot advanced over its kept draft ids and then its sampled id; the ids and
    the slots read back (`sampler.advance_reasoning`)."""
    state = gate.reasoning
    assert state is not None
    moved: list[list[int]] = [[], [], [], []]  # slot, count, progress, start id
    for seq, kept in zip(seqs, accepted):
        row = seq.reasoning_state
        if not kept or row is None or row.answering or row.slot is None:
            continue
        row.skip(seq.draft_ids[:kept])
        for values, value in zip(moved, (row.slot, row.num_reasoning_tokens, row.progress,
                                         row.start_id if row.awaiting else -1)):
            values.append(value if value is not None else -1)
    if moved[0]:
        host = torch.tensor(moved, dtype=torch.int32).to(state.device, non_blocking=True)
        slots = host[0].long()
        state.num_reasoning_tokens[slots] = host[1]
        state.progress[slots] = host[2]
        state.start_id[slots] = host[3]
    ids = torch.tensor(token_ids, dtype=torch.int64).to(state.device, non_blocking=True)
    return advance_reasoning(gate, ids)
