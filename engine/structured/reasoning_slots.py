"""The reasoning gate's slots: rows of the device `kernels.ReasoningState`, one per running
sequence that has a gate.

The gate itself runs on the device, once per step, for the whole batch: `kernels.sample` reads
each row's slot to decide whether the grammar's bitmask applies (only once the row answers, or
always with `enable_in_reasoning`) and whether a spent `thinking_token_budget` forces the next id
of the end marker; `kernels.update_reasoning_state` then advances every row by its sampled id.
The host keeps only what the step reads back together with the sampled ids (`RowGate.answering`,
`num_reasoning_tokens`, `progress`, `awaiting`), to know whether an id goes to the row's grammar
matcher, which mask to fill next step, and how far a speculative draft may run while the row
thinks (`RowGate.draft_room`).

A slot is taken when a gated sequence is scheduled and given back when it finishes, is aborted or
is preempted. A preempted sequence is recomputed from its prompt and outputs, so its slot is
re-derived when it is scheduled again: its output ids replayed through
`update_reasoning_state_ref` on a one-slot CPU state (O(outputs), once per recompute). Batch rows
without a gate share one extra slot that never thinks.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch
from thinkgate.engine.sequence import Sequence, SequenceStatus
from thinkgate.kernels import ReasoningState
from thinkgate.kernels.reasoning import update_reasoning_state_ref


@dataclass
class RowGate:
    """One sequence's gate parameters and the state last read back from its slot."""

    end_ids: list[int]
    prompt_answered: bool  # the prompt already closed thinking (`enable_thinking: false`)
    budget: int | None  # thinking_token_budget
    enable_in_reasoning: bool  # the grammar applies while thinking too
    start_id: int | None = None  # the start marker the model writes itself, awaited before the
    # budget counts (vLLM counts only the tokens after it); None: the prompt opened thinking
    slot: int | None = None  # None while the sequence holds no slot (not scheduled, preempted)
    answering: bool = False
    num_reasoning_tokens: int = 0
    progress: int = 0  # end-marker ids matched so far
    awaiting: bool = False  # the start marker has not been written yet

    def __post_init__(self) -> None:
        self.answering = self.prompt_answered
        self.awaiting = self.start_id is not None and not self.prompt_answered

    def forced(self, count: int, progress: int, awaiting: bool) -> bool:
        """Whether the budget forces the end marker in the slot state (count, progress,
        awaiting): `kernels.reasoning`'s rule."""
        return not awaiting and self.budget is not None and count - progress >= self.budget

    def draft_room(self, draft: Seq[int]) -> int:
        """How many leading ids of a thinking row's draft one verify pass may check
        (engine/core/speculative.py): none of them an end-marker id, and none after which the
        budget would force the marker, so every position of the pass thinks, unforced, in
        the slot state the step starts from (the sampled token after them may still be
        `</think>`, or be forced by the next step)."""
        if self.answering:
            return len(draft)
        count, progress, awaiting = self.num_reasoning_tokens, self.progress, self.awaiting
        if self.forced(count, progress, awaiting):
            return 0
        marker = set(self.end_ids)
        for n, token in enumerate(draft):
            if token in marker:
                return n
            count, awaiting = self._after(token, count, awaiting)
            if self.forced(count, 0, awaiting):
                return n
        return len(draft)

    def skip(self, ids: Seq[int]) -> None:
        """Advance this mirror over ids that `draft_room` let through (no marker id among
        them): what `update_reasoning_state` does to the slot, id by id."""
        if not ids:
            return
        count, awaiting = self.num_reasoning_tokens, self.awaiting
        for token in ids:
            count, awaiting = self._after(token, count, awaiting)
        self.num_reasoning_tokens, self.progress, self.awaiting = count, 0, awaiting

    def _after(self, token: int, count: int, awaiting: bool) -> tuple[int, bool]:
        """(count, awaiting) after one id that is not in the end marker."""
        if awaiting:  # nothing counts until the start marker, nor the marker itself
            return count, token != self.start_id
        return count + 1, False

    def initial_state(self) -> ReasoningState:
        """A one-slot CPU state as the gate starts, before any output id."""
        return ReasoningState.create([self.end_ids], thinking=[not self.prompt_answered],
                                     budgets=[self.budget],
                                     grammar_in_reasoning=[self.enable_in_reasoning],
                                     start_ids=[self.start_id])


def awaited_start(prompt: Seq[int], start_id: int | None, end_ids: Seq[int]) -> int | None:
    """The start marker a row's output must write before its budget counts: `start_id`, unless
    the prompt already opened thinking (vLLM's rule: its last start marker comes after its last
    end marker, e.g. a DeepSeek-R1 template ending in `<think>`)."""
    if start_id is None:
        return None
    ids = list(prompt)
    last_start = max((i for i, t in enumerate(ids) if t == start_id), default=-1)
    n = len(end_ids)
    last_end = max((i for i in range(len(ids) - n + 1) if ids[i:i + n] == list(end_ids)),
                   default=-1) if n else -1
    return None if last_start > last_end else start_id


def replay(gate: RowGate, output_ids: Seq[int]) -> ReasoningState:
    """The one-slot state after `output_ids`: the spec the device slot must equal."""
    state = gate.initial_state()
    for token in output_ids:
        update_reasoning_state_ref(state, torch.tensor([token]))
    return state


class ReasoningSlots:
    """The slot pool (max_num_seqs + the shared no-gate slot) over one device state."""

    def __init__(self, max_num_seqs: int, max_end_len: int, device: torch.device) -> None:
        self.state = ReasoningState.allocate(max_num_seqs + 1, max_end_len, device)
        self.null_slot = max_num_seqs  # answering, no marker: update leaves it unchanged
        self._free = list(range(max_num_seqs - 1, -1, -1))
        self._owner: dict[int, Sequence] = {}
        self.device = device

    @property
    def num_free(self) -> int:
        return len(self._free)

    def slots_for(self, seqs: list[Sequence]) -> torch.Tensor | None:
        """(B,) int32 slot per batch row on the device, taking a slot for each gated row that
        holds none; None when no row of the batch has a gate."""
        if all(seq.reasoning_state is None for seq in seqs):
            return None
        slots = []
        for seq in seqs:
            gate: RowGate | None = seq.reasoning_state
            if gate is None:
                slots.append(self.null_slot)
                continue
            if gate.slot is None:
                self._take(seq, gate)
            slots.append(gate.slot)
        return torch.tensor(slots, dtype=torch.int32).to(self.device, non_blocking=True)

    def release(self, seq: Sequence) -> None:
        gate: RowGate | None = seq.reasoning_state
        if gate is None or gate.slot is None:
            return
        self._owner.pop(gate.slot, None)
        self._free.append(gate.slot)
        gate.slot = None

    def read_back(self, seqs: list[Sequence], thinking: list[int], counts: list[int],
                  progress: list[int], starts: list[int]) -> None:
        """Record the state each gated row's slot holds after this step's update."""
        for seq, think, count, matched, start in zip(seqs, thinking, counts, progress, starts):
            gate: RowGate | None = seq.reasoning_state
            if gate is not None:
                gate.answering, gate.num_reasoning_tokens = not think, count
                gate.progress, gate.awaiting = matched, start >= 0

    def _take(self, seq: Sequence, gate: RowGate) -> None:
        if not self._free:  # finished sequences of a request that has not ended yet
            for owner in [s for s in self._owner.values() if s.status is not
                          SequenceStatus.RUNNING]:
                self.release(owner)
        assert self._free, "more gated sequences running than max_num_seqs"
        slot = self._free.pop()
        start = replay(gate, seq.output_token_ids)
        st = self.state
        st.set_slot(slot, gate.end_ids, thinking=not gate.prompt_answered, budget=gate.budget,
                    grammar_in_reasoning=gate.enable_in_reasoning)
        st.thinking[slot] = int(start.thinking[0])
        st.start_id[slot] = int(start.start_id[0])
        st.progress[slot] = int(start.progress[0])
        st.num_reasoning_tokens[slot] = int(start.num_reasoning_tokens[0])
        gate.slot = slot
        gate.answering = not int(start.thinking[0])
        gate.num_reasoning_tokens = int(start.num_reasoning_tokens[0])
        gate.progress, gate.awaiting = int(start.progress[0]), int(start.start_id[0]) >= 0
        self._owner[slot] = seq
