"""Speculative drafts for rows that still think (engine/core/spec_gate.py): a thinking row's
draft stops before the end marker and before the budget's forced end, its positions sample
free text (banned ids still banned while a grammar waits), and the reasoning gate ends each
step where plain decoding leaves it. Checked on the bundled reasoning model's own thinking,
which restates the question (where prompt-lookup drafts pay), against plain decoding."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from spec_helpers import SPEC, accepted, always_draft
from thinkgate import LLM, SamplingParams
from thinkgate.benchmarks.training.chats import heldout_chats
from thinkgate.engine.structured.reasoning_slots import RowGate, replay
from thinkgate.kernels.reasoning import reasoning_gate_ref

MAX_TOKENS = 120


def _mirror(gate: RowGate, state: Any) -> RowGate:
    """`gate` with the host mirror of a one-slot state (what the step reads back)."""
    gate.answering = not int(state.thinking[0])
    gate.num_reasoning_tokens = int(state.num_reasoning_tokens[0])
    gate.progress, gate.awaiting = int(state.progress[0]), int(state.start_id[0]) >= 0
    return gate


def _forced(state: Any) -> bool:
    return bool(reasoning_gate_ref(state, None)[1][0])


@pytest.mark.parametrize("marker", [[7], [5, 6, 5, 7]])
def test_draft_room_and_skip_follow_the_kernels_state(marker: list[int]) -> None:
    """Random slot states (replayed outputs) and random drafts over ids that include the
    marker's and the start marker's: every position up to the cut thinks unforced in the
    kernels' twin, the cut is as late as that allows (before a marker id, or where the budget
    would force), and `skip` over the kept ids leaves the mirror equal to the twin's slot."""
    rng = random.Random(27)
    alphabet = [1, 2, 3, 4, 9, *marker]
    for _ in range(250):
        gate = RowGate(marker, False, rng.choice([None, 0, 2, 5, 9]), False,
                       start_id=rng.choice([None, 9]))
        prefix = [rng.choice(alphabet) for _ in range(rng.randrange(12))]
        state = replay(gate, prefix)
        if not int(state.thinking[0]):
            continue
        _mirror(gate, state)
        draft = [rng.choice(alphabet) for _ in range(rng.randrange(1, 6))]
        n = gate.draft_room(draft)
        assert 0 <= n <= len(draft)
        gate_copy = RowGate(marker, False, gate.budget, False, start_id=gate.start_id)
        for j in range(n + 1 if n else 0):  # a draft's verify positions 0..n of this row
            at = replay(gate_copy, prefix + draft[:j])
            assert int(at.thinking[0]) and not _forced(at), (prefix, draft, n, j)
        if n < len(draft):
            after = replay(gate_copy, prefix + draft[:n + 1])
            assert draft[n] in marker or (n == 0 and _forced(state)) or _forced(after)
        gate.skip(draft[:n])
        want = _mirror(RowGate(marker, False, gate.budget, False, start_id=gate.start_id),
                       replay(gate_copy, prefix + draft[:n]))
        assert (gate.num_reasoning_tokens, gate.progress, gate.awaiting) == (
            want.num_reasoning_tokens, want.progress, want.awaiting)


@pytest.fixture(scope="module")
def reasoner() -> LLM:
    return LLM(model="thinkgate-reasoner", max_num_seqs=16)


@pytest.fixture(scope="module")
def spec_reasoner() -> LLM:
    return always_draft(LLM(model="thinkgate-reasoner", max_num_seqs=16,
                            speculative_config=SPEC))


def _chat(llm: LLM, chats: list[Any], params: SamplingParams, kind: str,
          budget: int | None = None, thinking: list[bool] | None = None) -> list[Any]:
    """Every chat in one batch through the chat layer (its template, constraint, parsers):
    `kind` "json" answers under the chat's schema, "tool" with a required call."""
    from thinkgate.benchmarks.eval_models import run

    json = kind == "json"
    return run(llm, chats, params=params, tool_choice="none" if json else "required",
               schema="json_schema" if json else None, budget=budget, thinking=thinking or True)


def _reading(out: Any) -> tuple[Any, ...]:
    """All a chat's output says, but the tool-call ids (random per call)."""
    message = out.message
    calls = [c["function"] for c in message.get("tool_calls") or []]
    return (list(out.output.outputs[0].token_ids), message["reasoning"], message["content"],
            calls, out.finish_reason, out.usage)


@pytest.mark.parametrize("budget", [None, 8])
@pytest.mark.parametrize("kind", ["plain", "json", "tool"])
def test_thinking_rows_draft_and_read_as_plain_decodings(reasoner: LLM, spec_reasoner: LLM,
                                                         kind: str, budget: int | None) -> None:
    """Greedy, with and without a thinking budget, then free text, a response_format or a
    required tool call: the same ids, reasoning/content split, calls and reasoning-token
    counts as without drafts, and drafts kept (in the thinking: the budget-free plain chats
    never leave it before the grammar-free answer)."""
    chats = heldout_chats("reasoner", kind, 4)
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    before = accepted(spec_reasoner)
    want = _chat(reasoner, chats, params, kind, budget)
    got = _chat(spec_reasoner, chats, params, kind, budget)
    assert [_reading(g) for g in got] == [_reading(w) for w in want]
    assert accepted(spec_reasoner) > before
    if budget is not None:
        assert all(g.usage["completion_tokens_details"]["reasoning_tokens"] == budget
                   for g in got)


@pytest.mark.parametrize("kind", ["plain", "tool"])
def test_thinking_only_requests_draft(spec_reasoner: LLM, kind: str) -> None:
    """Thinking cut by max_tokens, with no grammar, and with a required call's grammar waiting
    (stop ids and `<tool_call>` banned at every position): drafts run and are kept, so every
    kept draft id is a thinking id."""
    chats = heldout_chats("reasoner", kind, 4)
    end = spec_reasoner.get_tokenizer().convert_tokens_to_ids("</think>")
    before = spec_reasoner.llm_engine.stats()
    outs = _chat(spec_reasoner, chats, SamplingParams(temperature=0, max_tokens=24), kind)
    assert all(end not in o.output.outputs[0].token_ids for o in outs)  # thinking throughout
    stats = spec_reasoner.llm_engine.stats()
    for key in ("spec_decode_num_drafts", "spec_decode_num_accepted_tokens"):
        assert stats[key] > before[key], key


def test_seeded_samples_at_temperature_one(reasoner: LLM, spec_reasoner: LLM) -> None:
    """n = 4 seeded samples per chat at T = 1 with thinking and a budget: each sample is the one
    plain decoding draws (so the distribution at each position is unchanged)."""
    chats = heldout_chats("reasoner", "json", 2)
    params = SamplingParams(n=4, temperature=1.0, seed=27, max_tokens=64)
    before = accepted(spec_reasoner)
    want = _chat(reasoner, chats, params, "json", budget=24)
    got = _chat(spec_reasoner, chats, params, "json", budget=24)
    for w, g in zip(want, got):
        assert [o.token_ids for o in g.output.outputs] == [o.token_ids for o in w.output.outputs]
    assert accepted(spec_reasoner) > before


def test_thinking_and_answering_rows_draft_in_one_step(reasoner: LLM, spec_reasoner: LLM,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of thinking chats and chats whose answer is already under their schema
    (`enable_thinking: false`): verify steps carry drafts of both kinds at once, and every
    row reads as plain decoding."""
    speculator = spec_reasoner.llm_engine.speculator
    kinds: list[tuple[bool, bool]] = []
    verify = speculator.verify

    def spy(logits: torch.Tensor, starts: list[int], seqs: list[Any], *args: Any) -> Any:
        drafting = [s.reasoning_state for s in seqs if s.draft_ids]
        kinds.append((any(g is not None and not g.answering for g in drafting),
                      any(g is not None and g.answering for g in drafting)))
        return verify(logits, starts, seqs, *args)

    monkeypatch.setattr(speculator, "verify", spy)
    chats = heldout_chats("reasoner", "json", 8)
    thinking = [True, False] * 4
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    want = _chat(reasoner, chats, params, "json", thinking=thinking)
    got = _chat(spec_reasoner, chats, params, "json", thinking=thinking)
    assert [_reading(g) for g in got] == [_reading(w) for w in want]
    assert (True, True) in kinds, kinds


@pytest.mark.triton_path
def test_thinking_drafts_on_the_kernels_path(reasoner: LLM, spec_reasoner: LLM) -> None:
    """The device branch (Triton's accept and reasoning-update kernels; interpreted on CPU):
    a budget that forces </think> mid-thought and a schema after it."""
    chats = heldout_chats("reasoner", "json", 2)
    params = SamplingParams(temperature=0, max_tokens=64)
    before = accepted(spec_reasoner)
    want = _chat(reasoner, chats, params, "json", budget=32)
    got = _chat(spec_reasoner, chats, params, "json", budget=32)
    assert [_reading(g) for g in got] == [_reading(w) for w in want]
    assert accepted(spec_reasoner) > before
