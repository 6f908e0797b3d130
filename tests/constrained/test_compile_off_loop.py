"""Grammars compile off the step loop (issue 31 item 4, engine/structured/compiling.py): a slow compile
parks its own request while the others keep decoding; a compile past the timeout fails only that
request; an abort while compiling frees it. The slow compiles are xgrammar's (the synthetic
schemas take it hundreds of milliseconds; llguidance, which `auto` picks for them, one), so these
engines run with `structured_outputs_backend="xgrammar"`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from thinkgate import LLM, SamplingParams, StructuredOutputsParams
from thinkgate.api.chat import chat_layer_for
from thinkgate.benchmarks.bench_compile_stall import synthetic_schema

PROMPT = "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def _params(schema: dict[str, Any], max_tokens: int = 24) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens,
                          structured_outputs=StructuredOutputsParams(json=schema))


@pytest.fixture(autouse=True)
def no_compile_left_running() -> Any:
    """Compiles a test abandoned (timed out, aborted) still run on the shared compile threads;
    wait for them so that the next test's quick compiles are quick again."""
    yield
    for model in _MODELS:
        assert model.llm_engine.structured_output.grammar.cache.wait_idle(300)


_MODELS: list[Any] = []


def _xgrammar_llm(**kwargs: Any) -> Any:
    model = LLM(max_num_seqs=8, structured_outputs_backend="xgrammar", **kwargs)
    chat_layer_for(model)  # installs the constrained-decoding hook
    model.llm_engine.structured_output.grammar.cache.wait_idle(60)
    _MODELS.append(model)
    return model


@pytest.fixture(scope="module")
def llm() -> Any:
    # a limit far above the slow compile's ~1 s: on a machine at load 10+ it took over the
    # default 30 s, and these tests are about the step loop, not the limit
    model = _xgrammar_llm(structured_outputs_compile_timeout=300)
    yield model
    _MODELS.remove(model)


@pytest.fixture(scope="module")
def quick_timeout() -> Any:
    model = _xgrammar_llm(structured_outputs_compile_timeout=0.3)
    yield model
    _MODELS.remove(model)


def test_slow_compile_parks_only_its_request(llm: Any) -> None:
    engine = llm.llm_engine
    engine.add_request("plain", PROMPT, SamplingParams(temperature=0, max_tokens=400,
                                                       ignore_eos=True))
    for _ in range(3):
        engine.step()
    added = time.perf_counter()
    engine.add_request("slow", PROMPT, _params(synthetic_schema(1, 300)))
    add_took = time.perf_counter() - added
    compiled_after = 0.0
    assert "slow" in engine.compiling and "slow" not in engine.requests
    steps: list[float] = []
    plain_tokens_while_compiling = 0
    finished: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        compiling = "slow" in engine.compiling
        t = time.perf_counter()
        outputs = engine.step()
        steps.append(time.perf_counter() - t)
        if compiling and "slow" not in engine.compiling:
            compiled_after = time.perf_counter() - added
        assert engine.take_rejected() == []
        for out in outputs:
            if out.request_id == "plain" and compiling:
                plain_tokens_while_compiling += 1
            if out.finished:
                finished[out.request_id] = out
    assert plain_tokens_while_compiling >= 10, plain_tokens_while_compiling
    # No step waited for the compile: one that did would take about the compile's time (~1 s
    # quiet; several under load, when any step may also wait for a core)
    assert max(steps) < max(0.25, compiled_after / 3), (max(steps), compiled_after)
    assert add_took < max(0.1, compiled_after / 3), (add_took, compiled_after)  # nor the add
    assert set(finished) == {"plain", "slow"}
    slow = finished["slow"].outputs[0]
    assert slow.token_ids and slow.text.startswith("{")


def test_compile_past_the_timeout_fails_only_that_request(quick_timeout: Any) -> None:
    engine = quick_timeout.llm_engine
    engine.add_request("plain", PROMPT, SamplingParams(temperature=0, max_tokens=60,
                                                       ignore_eos=True))
    engine.add_request("slow", PROMPT, _params(synthetic_schema(2, 400)))
    rejected: list[tuple[str, BaseException]] = []
    plain = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                plain = out
        rejected += engine.take_rejected()
    assert [r for r, _ in rejected] == ["slow"]
    assert isinstance(rejected[0][1], ValueError)
    assert "did not compile within 0.3 s" in str(rejected[0][1])
    assert plain is not None and len(plain.outputs[0].token_ids) == 60


def test_llm_generate_raises_for_a_compile_past_the_timeout(quick_timeout: Any) -> None:
    with pytest.raises(ValueError, match="did not compile within"):
        quick_timeout.generate([PROMPT, PROMPT],
                               [SamplingParams(max_tokens=8), _params(synthetic_schema(3, 400))],
                               use_tqdm=False)
    assert not quick_timeout.llm_engine.has_unfinished_requests()
    out = quick_timeout.generate(PROMPT, SamplingParams(max_tokens=4), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4  # the engine serves on


def test_abort_while_compiling_frees_the_request(llm: Any) -> None:
    engine = llm.llm_engine
    engine.add_request("gone", PROMPT, _params(synthetic_schema(4, 300)))
    assert "gone" in engine.compiling
    assert engine.abort_request("gone") is None
    assert not engine.has_unfinished_requests()
    assert engine.take_rejected() == []


def test_a_bad_grammar_still_fails_at_add(llm: Any) -> None:
    """Checks before xgrammar and quick compile errors (compile threads free) raise from
    add_request, as before; a compile error found later comes out of take_rejected."""
    engine = llm.llm_engine
    with pytest.raises(ValueError):
        engine.add_request("bad", PROMPT, SamplingParams(
            structured_outputs=StructuredOutputsParams(regex="(unclosed")))
    assert not engine.has_unfinished_requests()
