"""The token trace (`SamplingParams(token_trace=True)`) on the demo model, in process.

Each entry is (token_id, masked, num_allowed, thinking, forced, ended_thinking); these tests
check it against what the request must have done: the ids it sampled, where `</think>` is, the
budget it was given, and masks counted from the tokenizer's own vocabulary.
"""

from __future__ import annotations

from typing import Any

import pytest
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.api.chat import chat_layer_for
from thinkgate.engine.demo.data import TOOLS

QUESTION = [{"role": "user", "content": "What's the weather in Paris?"}]
WEATHER_TOOLS = [TOOLS["get_weather"], TOOLS["get_time"]]


def _run(llm: Any, params: list[SamplingParams], **chat: Any) -> list[Any]:
    layer = chat_layer_for(llm)
    reqs = [layer.prepare(QUESTION, p, **chat) for p in params]
    outs = llm.generate([r.prompt_token_ids for r in reqs], [r.sampling_params for r in reqs],
                        use_tqdm=False)
    return [o.outputs[0] for o in outs]


def _end_id(tokenizer: Any) -> int:
    return tokenizer.convert_tokens_to_ids("</think>")


def test_trace_follows_the_ids_switches_at_the_marker_and_masks_after(llm: Any, tokenizer: Any
                                                                      ) -> None:
    base = dict(temperature=0.8, seed=11, max_tokens=80)
    out, plain = _run(llm, [SamplingParams(**base, token_trace=True), SamplingParams(**base)],
                      tools=WEATHER_TOOLS, tool_choice="required")
    assert plain.trace is None
    assert out.token_ids == plain.token_ids  # same batch, same seed: tracing only observes
    assert [e[0] for e in out.trace] == out.token_ids
    end = out.token_ids.index(_end_id(tokenizer))
    assert [i for i, e in enumerate(out.trace) if e[5]] == [end]
    assert all(e[3] for e in out.trace[: end + 1])  # thinking up to and including the marker
    assert not any(e[3] for e in out.trace[end + 1:])
    masked = [i for i, e in enumerate(out.trace) if e[1]]
    assert masked and min(masked) > end  # the grammar waits for the end of thinking
    vocab = llm.llm_engine.vocab_size
    for i in masked:
        assert 1 <= out.trace[i][2] < vocab
    assert all(e[2] is None for e in out.trace if not e[1])
    assert not any(e[4] for e in out.trace)  # no budget: nothing forced


def test_budget_forces_the_marker_and_mask_counts_match_the_vocab(llm: Any, tokenizer: Any
                                                                  ) -> None:
    budget = 3
    params = SamplingParams(temperature=0, max_tokens=40, token_trace=True,
                            structured_outputs=StructuredOutputsParams(regex="[ab]"))
    out, = _run(llm, [params], thinking_token_budget=budget)
    trace = out.trace
    end = out.token_ids.index(_end_id(tokenizer))
    assert [i for i, e in enumerate(trace) if e[4]] == [end]  # forced: the one-token marker
    assert out.token_ids[0] == tokenizer.convert_tokens_to_ids("<think>")  # the model opens
    # thinking itself: as in vLLM, <think> is not counted toward the budget
    assert trace[end][5] and sum(1 for e in trace[:end] if e[3]) == 1 + budget
    first_answer = next(e for e in trace[end + 1:] if e[1])
    single = sum(1 for i in range(len(tokenizer)) if tokenizer.decode([i]) in ("a", "b"))
    assert first_answer[2] == single
    assert tokenizer.decode([first_answer[0]]) in ("a", "b")
    last = trace[-1]  # after one character the grammar allows only its end: a stop id
    assert last[1] and last[2] == len(llm.llm_engine.eos_token_ids)


def test_closed_thinking_is_never_thinking(llm: Any) -> None:
    out, = _run(llm, [SamplingParams(temperature=0, max_tokens=12, token_trace=True)],
                chat_template_kwargs={"enable_thinking": False})
    assert out.trace and not any(e[3] or e[5] for e in out.trace)


def test_each_sample_has_its_own_trace(llm: Any) -> None:
    layer = chat_layer_for(llm)
    req = layer.prepare(QUESTION, SamplingParams(n=2, temperature=1.0, seed=5, max_tokens=8,
                                                 token_trace=True))
    out = llm.generate([req.prompt_token_ids], [req.sampling_params], use_tqdm=False)[0]
    for sample in out.outputs:
        assert [e[0] for e in sample.trace] == sample.token_ids
    assert llm.llm_engine.num_traced_requests == 0  # finished: steps trace nothing again


def test_an_aborted_traced_request_stops_the_tracing(llm: Any) -> None:
    engine = llm.llm_engine
    engine.add_request("traced-abort", [10, 11, 12], SamplingParams(max_tokens=4,
                                                                    token_trace=True))
    assert engine.num_traced_requests == 1
    engine.abort_request("traced-abort")
    assert engine.num_traced_requests == 0 and not engine.has_unfinished_requests()


def test_token_trace_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="token_trace"):
        SamplingParams(token_trace="yes")  # type: ignore[arg-type]
