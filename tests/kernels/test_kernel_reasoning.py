"""Reasoning state: Triton update == twin exactly; markers of 1 and 3 tokens; budgets force,
counting only after a start marker the model writes itself."""

from __future__ import annotations

import pytest
import torch
from thinkgate.kernels import ReasoningState, update_reasoning_state
from thinkgate.kernels.reasoning import (
    kmp_failure,
    reasoning_gate_ref,
    update_reasoning_state_ref,
    update_reasoning_state_triton,
)

THINK_END = 151668


def _fields(state: ReasoningState) -> list[torch.Tensor]:
    return [state.thinking, state.progress, state.num_reasoning_tokens, state.start_id]


def _clone(state: ReasoningState) -> ReasoningState:
    return ReasoningState(**{k: v.clone() for k, v in vars(state).items()})


def _run(state: ReasoningState, steps: list[list[int]], slots: torch.Tensor | None = None) -> None:
    """Feed the same ids to Triton and the twin step by step; they must agree after each."""
    twin = _clone(state)
    for ids in steps:
        t = torch.tensor(ids, dtype=torch.int64, device=state.device)
        update_reasoning_state_triton(state, t, slots)
        update_reasoning_state_ref(twin, t, slots)
        for a, b in zip(_fields(state), _fields(twin)):
            assert torch.equal(a, b)


def test_kmp_failure() -> None:
    assert kmp_failure([1, 1, 2]) == [0, 1, 0]
    assert kmp_failure([5, 6, 5, 6, 7]) == [0, 0, 1, 2, 0]


def test_single_token_marker_and_mixed_rows(device) -> None:
    # rows: thinking with </think>; no reasoning parser; prompt already closed thinking
    state = ReasoningState.create([[THINK_END], None, [THINK_END]],
                                  thinking=[True, True, False], device=device)
    _run(state, [[11, 12, 13], [THINK_END, THINK_END, THINK_END], [14, 15, 16]])
    assert state.thinking.tolist() == [0, 0, 0]
    assert state.num_reasoning_tokens.tolist() == [1, 0, 0]  # the marker is not reasoning


def test_three_token_marker_split_across_steps_with_overlap(device) -> None:
    marker = [7, 7, 9]  # self-overlapping: "7 7 7 9" must still end thinking
    state = ReasoningState.create([marker, marker, marker], device=device)
    steps = [[7, 7, 1], [7, 9, 7], [7, 7, 7], [9, 1, 9]]
    _run(state, steps)
    assert state.thinking.tolist() == [0, 1, 0]
    # row 0: 7 7 7 9 -> the first 7 was reasoning; row 1 never closed; row 2: 1 7 7 9
    assert state.num_reasoning_tokens.tolist() == [1, 4, 1]
    assert state.progress.tolist() == [0, 0, 0]


def test_matches_a_plain_history_scan(device) -> None:
    gen = torch.Generator().manual_seed(0)
    markers = [[3], [3, 4, 3], [1, 2, 3], [2, 2, 2], [4, 4]]
    state = ReasoningState.create(markers, device=device)
    ids = torch.randint(1, 5, (60, len(markers)), generator=gen)
    _run(state, [row.tolist() for row in ids])
    for r, marker in enumerate(markers):
        seq = ids[:, r].tolist()
        n = len(marker)
        ends = [i for i in range(n - 1, len(seq)) if seq[i - n + 1:i + 1] == marker]
        if ends:
            assert state.thinking[r] == 0
            assert state.num_reasoning_tokens[r] == ends[0] + 1 - n
        else:
            assert state.thinking[r] == 1 and state.num_reasoning_tokens[r] == len(seq)


def test_budget_forces_the_rest_of_the_marker(device) -> None:
    marker = [100, 101, 102]
    state = ReasoningState.create([marker, marker, [100]], budgets=[2, 0, None], device=device)
    forced_seen = []
    history: list[list[int]] = []
    for step in range(6):
        _, forced, forced_id = reasoning_gate_ref(state, None)
        free = [5 + step, 100 if step == 1 else 6, 6]  # row 1 starts the marker itself once
        ids = torch.where(forced, forced_id, torch.tensor(free, device=device))
        forced_seen.append(forced.tolist())
        history.append(ids.tolist())
        _run(state, [ids.tolist()])
    assert [h[0] for h in history] == [5, 6, 100, 101, 102, 10]
    assert [h[1] for h in history] == [100, 101, 102, 6, 6, 6]
    assert [f[0] for f in forced_seen] == [False, False, True, True, True, False]
    assert [f[1] for f in forced_seen] == [True, True, True, False, False, False]
    assert state.thinking.tolist() == [0, 0, 1]
    assert state.num_reasoning_tokens.tolist() == [2, 0, 6]


THINK_START = 151667


def test_budget_counts_after_a_start_marker_the_model_writes(device) -> None:
    # rows (budget 2): writes <think> first; writes it mid-output; never writes it; the prompt
    # opened thinking (nothing awaited); closes thinking unopened; writes <think> twice
    S, E = THINK_START, THINK_END
    free = [[S, 1, 2, 3, 4, 5], [1, 2, S, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 1, 1, 1, 1, 1],
            [1, E, 9, 9, 9, 9], [S, 1, S, 2, 2, 2]]
    state = ReasoningState.create([[E]] * 6, budgets=[2] * 6,
                                  start_ids=[S, S, S, None, S, S], device=device)
    history, forced_seen = [], []
    for step in range(6):
        _, forced, forced_id = reasoning_gate_ref(state, None)
        step_ids = torch.tensor([row[step] for row in free], device=device)
        ids = torch.where(forced, forced_id, step_ids)
        forced_seen.append(forced.tolist())
        history.append(ids.tolist())
        _run(state, [ids.tolist()])
    rows = [list(r) for r in zip(*history)]
    assert rows[0] == [S, 1, 2, E, 4, 5]  # <think> + 2 thinking ids, then </think> forced
    assert rows[1] == [1, 2, S, 2, 3, E]  # counts from its <think>, not before it
    assert rows[2] == free[2]  # never opened: nothing forced
    assert rows[3] == [1, 1, E, 1, 1, 1]  # nothing awaited: counts from the first id
    assert rows[4] == free[4]  # closed unopened
    assert rows[5] == [S, 1, S, E, 2, 2]  # a second <think> while thinking is thinking
    assert [f[3] for f in forced_seen] == [False, False, True, False, False, False]
    assert state.thinking.tolist() == [0, 0, 1, 0, 0, 0]
    assert state.num_reasoning_tokens.tolist() == [2, 2, 0, 2, 0, 2]
    assert state.start_id.tolist() == [-1, -1, S, -1, S, -1]


def test_slots_map_batch_rows_to_state(device) -> None:
    state = ReasoningState.allocate(4, 3, device=device)
    state.set_slot(2, [8, 9], budget=None)
    state.set_slot(0, [8], thinking=False)
    slots = torch.tensor([2, 0], device=device)
    _run(state, [[8, 1], [9, 8]], slots)
    assert state.thinking.tolist() == [0, 0, 0, 0]
    assert state.num_reasoning_tokens.tolist() == [0, 0, 0, 0]
    update_reasoning_state(state, torch.tensor([1, 1], device=device), slots)


def test_grammar_gate(device) -> None:
    state = ReasoningState.create([[5], [5], None], grammar_in_reasoning=[False, True, False],
                                  device=device)
    ok, forced, _ = reasoning_gate_ref(state, None)
    assert ok.tolist() == [False, True, True] and not forced.any()


def test_errors() -> None:
    with pytest.raises(ValueError, match="budget must be >= 0"):
        ReasoningState.create([[1]], budgets=[-2])
    with pytest.raises(ValueError, match="thinking has 2 entries"):
        ReasoningState.create([[1]], thinking=[True, False])
    state = ReasoningState.allocate(2, 2)
    with pytest.raises(ValueError, match="longer than max_end_len"):
        state.set_slot(0, [1, 2, 3])
    with pytest.raises(ValueError, match="slot 5 out of range"):
        state.set_slot(5, [1])
    with pytest.raises(ValueError, match="3 rows but the reasoning state has 2"):
        update_reasoning_state(state, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="int32/int64"):
        update_reasoning_state(state, torch.tensor([1.0, 2.0]))
