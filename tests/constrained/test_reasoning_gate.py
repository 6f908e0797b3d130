"""The host reasoning gate is the exact twin of the kernels' device reasoning state."""

from __future__ import annotations

import random

import pytest
import torch
from thinkgate.engine.reasoning_gate import ReasoningGate
from thinkgate.kernels.reasoning import (
    ReasoningState,
    reasoning_gate_ref,
    update_reasoning_state_ref,
)


@pytest.mark.parametrize("marker", [[7], [3, 4, 5], [2, 2, 3], [9, 9]])
@pytest.mark.parametrize("budget", [None, 0, 1, 4])
def test_gate_matches_the_device_state_step_by_step(marker: list[int], budget: int | None) -> None:
    rng = random.Random(sum(marker) * 31 + (budget or 0))
    num_rows = 12
    gates = [ReasoningGate(marker, answering=(r == 0), budget=budget) for r in range(num_rows)]
    state = ReasoningState.create([marker] * num_rows, thinking=[r != 0 for r in range(num_rows)],
                                  budgets=[budget] * num_rows)
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
                ids.append(rng.choice([*marker, 1, 2, 9]))
        update_reasoning_state_ref(state, torch.tensor(ids))
        for r, (gate, token) in enumerate(zip(gates, ids)):
            gate.advance(token)
            assert gate.answering == (int(state.thinking[r]) == 0)
            assert gate.progress == int(state.progress[r])
            assert gate.num_reasoning_tokens == int(state.num_reasoning_tokens[r])


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
