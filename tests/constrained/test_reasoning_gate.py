"""A plain-Python spec of the reasoning gate agrees with the kernels' reasoning state.

Per row: while thinking, each sampled id advances a KMP match of the end-of-thinking marker;
when it completes the row answers and the marker's ids are not reasoning tokens; with a budget,
once that many free reasoning tokens are spent the rest of the marker is forced. A row awaiting
the start marker the model writes itself (vLLM's rule) counts nothing and forces nothing until
that marker.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch
from thinkgate.kernels.reasoning import (
    ReasoningState,
    reasoning_gate_ref,
    update_reasoning_state_ref,
)


def _failure(marker: Sequence[int]) -> list[int]:
    """KMP failure function: fail[i] = length of the longest proper border of marker[:i+1]."""
    fail = [0] * len(marker)
    k = 0
    for i in range(1, len(marker)):
        while k and marker[i] != marker[k]:
            k = fail[k - 1]
        if marker[i] == marker[k]:
            k += 1
        fail[i] = k
    return fail


class ReasoningGate:
    """One row's thinking/answering state in plain Python: an independent spec of a
    `kernels.ReasoningState` slot (the engine runs only the device state).

    end_ids: the end-of-thinking marker's token ids; answering: the prompt already closed
    thinking; budget: free reasoning tokens (a partly matched marker not counted) after which
    the rest of the marker is forced; None = unlimited; start_id: the start marker the output
    must write before anything counts toward the budget (None: nothing awaited).
    """

    __slots__ = ("end_ids", "answering", "budget", "progress", "num_reasoning_tokens", "_fail",
                 "awaiting")

    def __init__(self, end_ids: Sequence[int], answering: bool = False,
                 budget: int | None = None, start_id: int | None = None) -> None:
        if not end_ids:
            raise ValueError("a reasoning gate needs the end-of-thinking marker ids, got none")
        if budget is not None and budget < 0:
            raise ValueError(f"thinking_token_budget must be >= 0, got {budget}")
        self.end_ids = [int(t) for t in end_ids]
        self.answering = answering
        self.budget = budget
        self.progress = 0  # marker ids matched so far
        self.num_reasoning_tokens = 0  # ids sampled while thinking, the completed marker's not
        self._fail = _failure(self.end_ids)
        self.awaiting = start_id  # cleared once the output writes it

    def forced_token(self) -> int | None:
        """The id the row must sample next (budget spent, marker not complete), else None."""
        if self.answering or self.budget is None or self.awaiting is not None:
            return None
        if self.num_reasoning_tokens - self.progress < self.budget:
            return None
        return self.end_ids[self.progress]

    def advance(self, token_id: int) -> None:
        """Record one sampled id."""
        if self.answering:
            return
        marker, k = self.end_ids, self.progress
        while k and marker[k] != token_id:
            k = self._fail[k - 1]
        if marker[k] == token_id:
            k += 1
        self.progress = k
        if k == len(marker):
            self.answering, self.progress = True, 0
            if self.awaiting is None:
                self.num_reasoning_tokens -= len(marker) - 1  # its earlier ids were counted
        elif self.awaiting is None:
            self.num_reasoning_tokens += 1
        elif token_id == self.awaiting:
            self.awaiting = None  # the marker itself is not counted either


@pytest.mark.parametrize("marker", [[7], [3, 4, 5], [2, 2, 3], [9, 9]])
@pytest.mark.parametrize("budget", [None, 0, 1, 4])
@pytest.mark.parametrize("start", [None, 8])
def test_gate_matches_the_device_state_step_by_step(marker: list[int], budget: int | None,
                                                    start: int | None) -> None:
    rng = random.Random(sum(marker) * 31 + (budget or 0) + (start or 0))
    num_rows = 12
    starts = [start if r % 2 else None for r in range(num_rows)]  # odd rows await it
    gates = [ReasoningGate(marker, answering=(r == 0), budget=budget, start_id=starts[r])
             for r in range(num_rows)]
    state = ReasoningState.create([marker] * num_rows, thinking=[r != 0 for r in range(num_rows)],
                                  budgets=[budget] * num_rows, start_ids=starts)
    for _ in range(30):
        _, forced, forced_id = reasoning_gate_ref(state, None)
        ids = []
        for r, gate in enumerate(gates):
            want = gate.forced_token()
            assert bool(forced[r]) == (want is not None)
            if want is not None:
                assert int(forced_id[r]) == want
                ids.append(want)
            else:  # small alphabet so markers and partial markers occur by chance
                ids.append(rng.choice([*marker, 1, 2, 9, 8]))
        update_reasoning_state_ref(state, torch.tensor(ids))
        for r, (gate, token) in enumerate(zip(gates, ids)):
            gate.advance(token)
            assert gate.answering == (int(state.thinking[r]) == 0)
            assert gate.progress == int(state.progress[r])
            assert gate.num_reasoning_tokens == int(state.num_reasoning_tokens[r])
            if not gate.answering:
                assert (gate.awaiting or -1) == int(state.start_id[r])


def test_budget_forces_the_whole_marker_and_counts_reasoning_without_it() -> None:
    gate = ReasoningGate([3, 4, 5], budget=2)
    for token in (1, 3, 6):  # "3" starts the marker (not free reasoning yet), "6" breaks it
        assert gate.forced_token() is None
        gate.advance(token)
    forced = []
    while gate.forced_token() is not None:
        forced.append(gate.forced_token())
        gate.advance(forced[-1])
    assert forced == [3, 4, 5] and gate.answering
    assert gate.num_reasoning_tokens == 3  # 1, 3, 6; the marker's ids are not reasoning


def test_marker_as_the_very_first_token() -> None:
    gate = ReasoningGate([7], budget=0)
    assert gate.forced_token() == 7
    gate.advance(7)
    assert gate.answering and gate.num_reasoning_tokens == 0


def test_bad_gate_arguments() -> None:
    with pytest.raises(ValueError, match="marker"):
        ReasoningGate([])
    with pytest.raises(ValueError, match="-1"):
        ReasoningGate([1], budget=-1)


def test_an_awaited_start_marker_is_not_counted() -> None:
    gate = ReasoningGate([7], budget=2, start_id=8)
    out = []
    for token in (1, 2, 8, 3, 4, 5):  # 1, 2 before <think> and <think> itself are not counted
        token = gate.forced_token() or token
        out.append(token)
        gate.advance(token)
    assert out == [1, 2, 8, 3, 4, 7] and gate.answering and gate.num_reasoning_tokens == 2


def test_the_start_marker_is_awaited_unless_the_prompt_opened_thinking() -> None:
    from thinkgate.engine.structured.reasoning_slots import RowGate, awaited_start, replay

    start, end = 8, [7]
    assert awaited_start([1, 2, 3], start, end) == start  # Qwen3: the model writes <think>
    assert awaited_start([1, start, 2], start, end) is None  # DeepSeek-R1: the prompt opened it
    assert awaited_start([start, 2, 7, 3], start, end) == start  # an earlier turn closed it
    assert awaited_start([1, 2], None, end) is None  # multi-token start: not awaited
    assert awaited_start([start, 5, 6, 2], start, [5, 6]) == start  # multi-token end marker
    gate = RowGate(end, False, 2, False, start)
    state = replay(gate, [1, start, 2])  # preemption replays the awaited marker too
    assert int(state.start_id[0]) == -1 and int(state.num_reasoning_tokens[0]) == 1
    assert int(replay(gate, [1, 2]).start_id[0]) == start
