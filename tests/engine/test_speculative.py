"""Speculative decoding with n-gram drafts (engine/core/speculative.py): the same tokens as plain
decoding (greedy, seeded, under grammars, with stops, limits, logprobs, n > 1 and thinking),
drafts really kept, and vLLM's config names and defaults."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from spec_helpers import SPEC, accepted, always_draft, same
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import SpeculativeConfig
from thinkgate.engine.core.speculative import NgramProposer
from thinkgate.engine.sequence import Sequence

REPEATING = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps "
    "over the lazy dog. the quick brown fox",
    "1 2 3 4 5 6 7 8 9 10 1 2 3 4 5 6 7 8 9 10 1 2 3",
    "alpha beta gamma delta alpha beta gamma delta alpha beta",
]


@pytest.fixture(scope="module")
def spec(demo_dir: str) -> LLM:
    return always_draft(LLM(model=demo_dir, max_num_seqs=64, speculative_config=SPEC))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafts_are_kept_and_the_tokens_are_plain_decodings(llm: LLM, spec: LLM,
                                                            temperature: float) -> None:
    before = spec.llm_engine.stats()
    got = same(llm, spec, REPEATING, SamplingParams(temperature=temperature, seed=11,
                                                    max_tokens=48, ignore_eos=True))
    stats = spec.llm_engine.stats()
    assert stats["spec_decode_num_drafts"] > 0
    assert accepted(spec) > before["spec_decode_num_accepted_tokens"]  # kept from drafts
    # each request's own counts: they add up to the engine's, and its rate and length follow
    mine = [o.metrics for o in got if o.metrics]
    for key in ("spec_decode_num_drafts", "spec_decode_num_draft_tokens",
                "spec_decode_num_accepted_tokens"):
        assert sum(m[key] for m in mine) == stats[key] - before[key]
    for m in mine:
        kept = m["spec_decode_num_accepted_tokens"]
        assert m["spec_decode_acceptance_rate"] == kept / m["spec_decode_num_draft_tokens"]
        assert m["spec_decode_mean_accepted_length"] == 1 + kept / m["spec_decode_num_drafts"]
    assert stats["spec_decode_num_requests"] - before["spec_decode_num_requests"] == len(mine)
    rate_sum = (stats["spec_decode_request_acceptance_rate_sum"]
                - before["spec_decode_request_acceptance_rate_sum"])
    assert rate_sum == pytest.approx(sum(m["spec_decode_acceptance_rate"] for m in mine))


def test_stops_and_max_tokens_inside_a_draft(llm: LLM, spec: LLM) -> None:
    same(llm, spec, REPEATING, SamplingParams(temperature=0, max_tokens=7, ignore_eos=True))
    # a piece of each plain answer from well inside it (where the n-gram drafts run by then);
    # past the end of turn too (ignore_eos), so that the stop string is the only way to stop
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    free = llm.generate(REPEATING, params, use_tqdm=False)
    stops = [o.outputs[0].text[24:30] for o in free]
    assert all(len(s) == 6 for s in stops), stops
    got = same(llm, spec, REPEATING, SamplingParams(temperature=0, max_tokens=48, stop=stops,
                                                    ignore_eos=True))
    for o, whole, stop in zip(got, free, stops):
        out = o.outputs[0]
        assert out.finish_reason == "stop" and out.stop_reason == stop
        assert whole.outputs[0].text.startswith(out.text) and len(out.text) <= 24


def test_logprobs_of_kept_draft_tokens(llm: LLM, spec: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, logprobs=3)
    want = llm.generate(REPEATING, params, use_tqdm=False)
    got = spec.generate(REPEATING, params, use_tqdm=False)
    for a, b in zip(want, got):
        x, y = a.outputs[0], b.outputs[0]
        assert y.token_ids == x.token_ids and len(y.logprobs) == len(y.token_ids)
        for ex, ey in zip(x.logprobs, y.logprobs):
            assert sorted(ey) == sorted(ex)
            for token in ey:
                assert ey[token].logprob == pytest.approx(ex[token].logprob, abs=1e-4)
                assert ey[token].rank == ex[token].rank
        assert y.cumulative_logprob == pytest.approx(x.cumulative_logprob, abs=1e-3)


def test_n_samples_and_rows_that_may_not_draft_in_one_batch(llm: LLM, spec: LLM) -> None:
    """n = 3 seeded samples per prompt, beside rows with a presence penalty (which never
    draft): every row as plain decoding gives it."""
    same(llm, spec, REPEATING, SamplingParams(n=3, temperature=0.8, seed=5, max_tokens=20,
                                              ignore_eos=True))
    mixed = [SamplingParams(temperature=0, max_tokens=32, ignore_eos=True),
             SamplingParams(temperature=0, max_tokens=32, ignore_eos=True,
                            presence_penalty=0.5)] * 2
    want = llm.generate(REPEATING[:2] * 2, mixed, use_tqdm=False)
    got = spec.generate(REPEATING[:2] * 2, mixed, use_tqdm=False)
    assert [g.outputs[0].token_ids for g in got] == [w.outputs[0].token_ids for w in want]


SCHEMA = {"type": "object", "properties": {
    "items": {"type": "array", "minItems": 3, "maxItems": 4, "items": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                         "count": {"type": "integer", "minimum": 0,
                                                   "maximum": 99}},
        "required": ["name", "count"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


@pytest.mark.parametrize("temperature", [0.0, pytest.param(1.0, marks=pytest.mark.triton_path)])
def test_drafts_under_a_json_schema_are_sampled_under_each_positions_mask(
        llm: LLM, spec: LLM, temperature: float) -> None:
    """Repeated object keys draft well; every kept token was sampled under the mask of the
    state the draft leads to, so outputs validate and equal plain decoding's."""
    params = SamplingParams(n=3, temperature=temperature, seed=3, max_tokens=200)
    kwargs = {"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "items", "schema": SCHEMA}},
              "chat_template_kwargs": {"enable_thinking": False}, "use_tqdm": False}
    messages = [{"role": "user", "content": "List some items as JSON."}]
    before = accepted(spec)
    want = llm.chat(messages, params, **kwargs)
    got = spec.chat(messages, params, **kwargs)
    assert [o.message for o in got] == [o.message for o in want]
    for out in got:
        if out.finish_reason == "stop":
            jsonschema.validate(json.loads(out.message["content"]), SCHEMA)
    assert any(o.finish_reason == "stop" for o in got)
    assert accepted(spec) > before


def test_a_thinking_row_drafts_and_its_answer_matches(llm: LLM, spec: LLM) -> None:
    """The demo model thinks before its schema's answer: the same message as plain decoding
    (more thinking cases on the reasoning model: test_spec_thinking.py)."""
    messages = [{"role": "user", "content": "Name a city, twice: Paris Paris"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    params = SamplingParams(temperature=0, max_tokens=96)
    want = llm.chat(messages, params, use_tqdm=False, response_format=fmt)[0]
    got = spec.chat(messages, params, use_tqdm=False, response_format=fmt)[0]
    assert got.message == want.message and got.finish_reason == want.finish_reason
    assert got.message["reasoning"]


def _seq(tokens: list[int]) -> Sequence:
    return Sequence("r", 0, tokens, SamplingParams(), 0, None, 1 << 20)  # type: ignore[arg-type]


def test_the_proposer_takes_the_latest_longest_match() -> None:
    proposer = NgramProposer(k=3, high=3, low=1)
    seq = _seq([1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3])
    assert proposer.propose(seq, 10) == [7, 8, 5]  # "1 2 3" last seen before 7 8 5
    assert proposer.propose(seq, 2) == [7, 8]  # cut to the room left
    seq.token_ids.append(7)  # "2 3 7" seen once, before 8 5 1
    assert proposer.propose(seq, 10) == [8, 5, 1]
    assert proposer.propose(_seq([4, 5, 6]), 10) == []  # nothing repeats
    assert NgramProposer(k=2, high=4, low=2).propose(_seq([1, 2, 9, 3, 2]), 5) == []  # "3 2"


def test_config_follows_vllm_names_and_defaults() -> None:
    parsed = SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 3})
    assert (parsed.prompt_lookup_max, parsed.prompt_lookup_min) == (5, 5)
    parsed = SpeculativeConfig.parse('{"method": "[ngram]", "num_speculative_tokens": 2, '
                                     '"prompt_lookup_max": 3}')
    assert (parsed.method, parsed.prompt_lookup_max, parsed.prompt_lookup_min) == ("ngram", 3, 3)
    assert SpeculativeConfig.parse(None) is None
    for bad, message in (({"method": "eagle", "num_speculative_tokens": 2}, "'eagle'"),
                         ({"method": "ngram"}, "num_speculative_tokens"),
                         ({"num_speculative_tokens": 2, "prompt_lookup_min": 4,
                           "prompt_lookup_max": 2}, "prompt_lookup_min \\(4\\)"),
                         ({"num_speculative_tokens": 2, "model": "x"}, "unknown fields"),
                         ("{not json", "not JSON")):
        with pytest.raises(ValueError, match=message):
            SpeculativeConfig.parse(bad)


def test_the_serve_flag_reaches_the_engine_config() -> None:
    from thinkgate.api.cli import build_parser
    from thinkgate.api.launch import engine_kwargs
    from thinkgate.engine.config import EngineConfig

    ns = build_parser().parse_args(["serve", "--speculative-config", json.dumps(SPEC)])
    kwargs = engine_kwargs(ns)
    assert kwargs["speculative_config"] == SPEC
    with pytest.raises(ValueError, match="speculative_config.method"):
        EngineConfig(speculative_config={"method": "medusa", "num_speculative_tokens": 1})


def test_drafts_stop_where_jump_forward_writes_the_forced_text(llm: LLM, spec: LLM) -> None:
    """Drafts run into text the grammar forces (the next key of an object): plain decoding
    writes that text as jump-forward ids, so a draft stops before it and the tokens stay plain
    decoding's, on each backend the schema meets (repeats promote a hot schema to xgrammar)."""
    from thinkgate.engine.sampling_params import StructuredOutputsParams

    tokenizer = llm.get_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "List 24 items as JSON."}], tokenize=False,
        add_generation_prompt=True, enable_thinking=False)
    schema = {**SCHEMA, "properties": {"items": {**SCHEMA["properties"]["items"],
                                                 "minItems": 24, "maxItems": 30}}}
    params = SamplingParams(temperature=0, max_tokens=96, ignore_eos=True,
                            structured_outputs=StructuredOutputsParams(json=schema))
    before = accepted(spec)
    for _ in range(3):
        same(llm, spec, [prompt], params)
    assert accepted(spec) > before


def _calls(out: Any) -> tuple[Any, ...]:
    message = out.message
    return message["content"], [c["function"] for c in message["tool_calls"]]


def test_forced_tool_calls_draft_from_the_question_and_read_as_plain_decodings(
        llm: LLM, spec: LLM) -> None:
    """`tool_choice: required` over tools whose parameters allow other keys (the repeated-key
    checks run along each draft on a copy of the key tracker): drafts copy the question and
    the tool list, the calls equal plain decoding's."""
    from thinkgate.benchmarks.bench_spec import ASKS, TOOLS

    kwargs = {"tools": TOOLS, "tool_choice": "required", "use_tqdm": False,
              "chat_template_kwargs": {"enable_thinking": False}}
    messages = [[{"role": "user", "content": ask}] for ask in ASKS]
    before = accepted(spec)
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, seed=9, max_tokens=128)
        want, got = llm.chat(messages, params, **kwargs), spec.chat(messages, params, **kwargs)
        assert [_calls(g) for g in got] == [_calls(w) for w in want]  # ids are random
        assert all(g.message["tool_calls"] for g in got)
    assert accepted(spec) > before


def test_drafts_on_the_paged_layout_through_preemption(llm: LLM, demo_dir: str) -> None:
    """Paged KV blocks for the draft positions, a pool so small that rows are preempted (and
    their drafts dropped) and recomputed: every row still reads as plain decoding."""
    small = always_draft(LLM(model=demo_dir, max_num_seqs=8, kv_layout="paged",
                             num_kv_blocks=12, max_model_len=160,  # 69-token prompts + 64
                             enable_prefix_caching=False, speculative_config=SPEC))
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    same(llm, small, [f"{i} {p}" for i, p in enumerate(REPEATING * 2)], params)
    stats = small.llm_engine.stats()
    assert stats["num_preemptions"] > 0 and stats["spec_decode_num_accepted_tokens"] > 0


def test_the_sampled_distribution_is_unchanged_at_temperature_one(llm: LLM, spec: LLM) -> None:
    """16 seeded samples at T = 1: each sample is the one plain decoding draws, so every
    position's empirical distribution is the same (total variation 0)."""
    from collections import Counter

    params = SamplingParams(n=8, temperature=1.0, seed=21, max_tokens=12, ignore_eos=True)
    want = llm.generate(REPEATING[1:3], params, use_tqdm=False)
    got = spec.generate(REPEATING[1:3], params, use_tqdm=False)
    for a, b in zip(want, got):
        for pos in range(12):
            pa = Counter(o.token_ids[pos] for o in a.outputs)
            pb = Counter(o.token_ids[pos] for o in b.outputs)
            assert sum(abs(pa[t] - pb[t]) for t in pa | pb) == 0, pos
    assert spec.llm_engine.stats()["spec_decode_num_accepted_tokens"] > 0
