"""Structured outputs that finish valid: bounded numbers, and completion before max_tokens.

On the demo model at temperature 1 (its JSON numbers run to hundreds of digits when unbounded).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.engine.structured.grammar_compile import GrammarCompileCache
from thinkgate.engine.structured.json_completion import CompletionPlanner, shortest_completion

PROMPT = ("<|im_start|>user\nDescribe it as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")

# the issue's case: strings with maxLength, enums, integers, one number
# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
SMALL_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "additionalProperties": False, "properties": {"name": {"type": "string", "maxLength": 10},
                                      "age": {"type": "integer"}}, "required": ["name", "age"]},
    {"type": "object", "additionalProperties": False, "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "count": {"type": "integer"}},
     "required": ["color", "count"]},
    {"type": "object", "additionalProperties": False, "properties": {"label": {"type": "string", "maxLength": 6},
                                      "score": {"type": "number"}},
     "required": ["label", "score"]},
]


def _so(**kw: Any) -> StructuredOutputsParams:
    return StructuredOutputsParams(**kw)


def test_the_24_generation_case_all_valid_by_default(llm: Any) -> None:
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=160,
                             structured_outputs=_so(json=SMALL_SCHEMAS[i % 3]))
              for i in range(24)]
    outs = llm.generate([PROMPT] * 24, params, use_tqdm=False)
    for i, out in enumerate(outs):
        jsonschema.validate(json.loads(out.outputs[0].text), SMALL_SCHEMAS[i % 3])


def test_number_bounds_in_the_grammar() -> None:
    cache = GrammarCompileCache(xgr.TokenizerInfo([chr(c) for c in range(32, 127)]), "ascii")

    def ok(text: str, **kw: Any) -> bool:
        m = xgr.GrammarMatcher(cache.get(_so(**kw)), terminate_without_stop_token=True)
        return m.accept_string(text) and m.is_terminated()

    integer, number = {"type": "integer"}, {"type": "number"}
    assert ok("9" * 16, json=integer) and not ok("9" * 17, json=integer)
    assert ok("-" + "9" * 16, json=integer) and not ok("1" + "0" * 16, json=integer)
    assert ok("1." + "5" * 16 + "e-123", json=number)
    assert not ok("1." + "5" * 17, json=number) and not ok("1e1234", json=number)
    assert ok("1" * 40, json=integer, bound_numbers=False)  # the option turns the bound off
    obj = '{"a": [' + "1" * 17 + "]}"
    assert not ok(obj, json_object=True) and ok(obj, json_object=True, bound_numbers=False)
    # one schema bound: the other side is bounded; the schema's own bounds still apply
    low = {"type": "integer", "minimum": 10}
    assert not ok("9", json=low) and ok("9" * 16, json=low) and not ok("9" * 17, json=low)
    big = {"type": "integer", "minimum": 0, "maximum": 10**18}
    assert ok(str(10**18), json=big) and not ok(str(10**18 + 1), json=big)
    assert not ok("1" * 17, json={"type": "number", "maximum": 5})


def _tool_tag(schema: dict[str, Any]) -> dict[str, Any]:
    from thinkgate.parsers.tools.grammar import tool_call_structural_tag

    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return tool_call_structural_tag("hermes", [tool], "required")


def test_tool_arguments_are_bounded_too() -> None:
    cache = GrammarCompileCache(xgr.TokenizerInfo([chr(c) for c in range(32, 127)]), "ascii")
    from thinkgate.parsers.tools.grammar import render_calls

    tag = _tool_tag({"type": "object", "additionalProperties": False, "properties": {"n": {"type": "integer"}},
                     "required": ["n"]})
    for digits, accepted in ((16, True), (17, False)):
        call = render_calls("hermes", [("f", {"n": int("7" * digits)})])
        m = xgr.GrammarMatcher(cache.get(_so(structural_tag=tag)))
        assert m.accept_string(call) is accepted


def test_a_forced_plan_past_256_characters_is_written_whole() -> None:
    # one character per token: the plan from the start is ~310 ids; writing all but its last
    # in one forward passes the 256 characters after which the planner stops following a
    # plan it is not forcing (this crashed the engine's step: the plan was dropped mid-write)
    cache = GrammarCompileCache(xgr.TokenizerInfo([chr(c) for c in range(32, 127)]), "ascii")
    schema = {"type": "object", "properties": {"a": {"type": "string", "minLength": 300}},
              "required": ["a"], "additionalProperties": False}
    m = xgr.GrammarMatcher(cache.get(_so(json=schema)))
    planner = CompletionPlanner(lambda t: [ord(c) - 32 for c in t], lambda i: chr(i + 32), 0)
    planner.start(m)
    plan = list(planner.plan or [])
    assert len(plan) > 300
    planner.forcing = True  # what `accept` sets once the plan fills the tokens left
    ids = planner.take_forced(m, 1000)
    assert ids == plan[:-1] and planner.forced_token == plan[-1]
    assert m.accept_token(plan[-1])
    text = "".join(chr(i + 32) for i in plan)
    jsonschema.validate(json.loads(text), schema)


def test_the_search_never_writes_a_key_twice() -> None:
    # an object past 6 members lets its optional ones repeat in the grammar (the repeated-key
    # checks take a repeat out while decoding); the search writing "a" again and again found
    # no completion, so the request ran to max_tokens and was cut (a third of 250 real
    # schemas with such objects, at temperature 1)
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.structured.grammar import Grammar
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    schema = {"type": "object", "additionalProperties": False, "required": ["title", "id"],
              "properties": {**{k: {"type": "array", "items": {"type": "string"}}
                                for k in ("alpha", "alto", "beta", "gamma", "delta", "eps")},
                             "title": {"type": "string"}, "id": {"type": "string"}}}
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend="guidance")
    try:
        row = g.new_request(_so(json=schema, complete_before_max_tokens=True))
        text = shortest_completion(row.matcher.fork(), False)
    finally:
        g.close()
    assert text is not None
    jsonschema.validate(json.loads(text), schema)
    keys = [k for k, _ in json.loads(text, object_pairs_hook=lambda pairs: pairs)]
    assert len(keys) == len(set(keys)), text


def test_shortest_completion_of_a_partial_object() -> None:
    cache = GrammarCompileCache(xgr.TokenizerInfo([chr(c) for c in range(32, 127)]), "ascii")
    schema = {"type": "object", "additionalProperties": False, "properties": {
        "a": {"type": "string", "minLength": 2}, "b": {"enum": ["xy", "z"]},
        "c": {"type": "array", "items": {"type": "integer", "minimum": 3}, "minItems": 1}},
        "required": ["a", "b", "c"]}
    m = xgr.GrammarMatcher(cache.get(_so(json=schema)))
    assert m.accept_string('{"a": "q')
    text = shortest_completion(m, in_string=True)
    assert text is not None
    jsonschema.validate(json.loads('{"a": "q' + text), schema)


def test_cut_output_is_completed_with_length_and_stop_reason(llm: Any) -> None:
    schema = SMALL_SCHEMAS[0]
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=m, structured_outputs=_so(
        json={**schema, "properties": {**schema["properties"],
                                       "name": {"type": "string"}}},
        complete_before_max_tokens=True))
        for i, m in enumerate((14, 16, 20, 24))]
    outs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)
    for out, p in zip(outs, params):
        sample = out.outputs[0]
        jsonschema.validate(json.loads(sample.text), p.structured_outputs.json)
        assert len(sample.token_ids) <= p.max_tokens
        if sample.finish_reason == "length":
            assert sample.stop_reason == "completed_at_max_tokens", sample
        else:
            assert sample.finish_reason == "stop"


# ---- the property test ----
_NAMES = ["a", "b", "id", "name", "tags", "x"]


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.tuples(st.integers(-50, 50), st.integers(0, 100))
    return st.one_of(
        st.just({"type": "integer"}), st.just({"type": "number"}), st.just({"type": "boolean"}),
        bounds.map(lambda b: {"type": "integer", "minimum": b[0], "maximum": b[0] + b[1]}),
        st.integers(-5, 5).map(lambda lo: {"type": "number", "minimum": lo}),
        st.tuples(st.integers(0, 3), st.integers(0, 8)).map(
            lambda b: {"type": "string", "minLength": b[0], "maxLength": b[0] + b[1]}),
        st.just({"type": "string"}),
        st.lists(st.sampled_from(["red", "green", "blue", "a b"]), min_size=1, max_size=3,
                 unique=True).map(lambda e: {"enum": e}),
    )


def _container(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "object", "properties": props,
                "required": [n for n in props if n in required]}

    objects = st.builds(obj, st.dictionaries(st.sampled_from(_NAMES), inner, min_size=1,
                                             max_size=3),
                        st.lists(st.sampled_from(_NAMES), max_size=3))
    arrays = st.tuples(inner, st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]})
    return st.one_of(objects, arrays)


SCHEMAS = st.recursive(_leaf(), _container, max_leaves=6).filter(
    lambda s: s.get("type") in ("object", "array"))


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest instance of a generated schema, built from the schema alone."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema["type"]
    if kind == "object":
        return {n: minimal_instance(schema["properties"][n]) for n in schema["required"]}
    if kind == "array":
        return [minimal_instance(schema["items"])] * schema["minItems"]
    if kind == "string":
        return "a" * schema.get("minLength", 0)
    if kind == "boolean":
        return False
    return max(schema.get("minimum", 0), 0)


def _check_property(llm: Any, tokenizer: Any, schema: dict[str, Any], max_tokens: int,
                    seed: int) -> None:
    """Option on: every output parses and validates, or the request is refused at once with a
    ValueError naming max_tokens, and only when even the smallest instance of the schema
    (built from the schema alone) takes more tokens than max_tokens. Option off: every output
    that ends with "stop" validates."""
    smallest = len(tokenizer.encode(json.dumps(minimal_instance(schema)),
                                    add_special_tokens=False))
    on = [SamplingParams(temperature=1.0, seed=seed + i, max_tokens=max_tokens,
                         structured_outputs=_so(json=schema, complete_before_max_tokens=True))
          for i in range(2)]
    off = [SamplingParams(temperature=1.0, seed=seed + i, max_tokens=max_tokens,
                          structured_outputs=_so(json=schema)) for i in range(2, 4)]
    try:
        outs = llm.generate([PROMPT] * 4, on + off, use_tqdm=False)
    except ValueError as e:
        assert f"max_tokens={max_tokens}" in str(e), e
        assert smallest > max_tokens, (smallest, str(e))
        outs = [None, None] + llm.generate([PROMPT] * 2, off, use_tqdm=False)
    for out, p in zip(outs, on + off):
        if out is None:
            continue
        sample = out.outputs[0]
        assert len(sample.token_ids) <= max_tokens
        if p.structured_outputs.complete_before_max_tokens:
            jsonschema.validate(json.loads(sample.text), schema)
            if sample.finish_reason == "length":
                assert sample.stop_reason == "completed_at_max_tokens", sample
        elif sample.finish_reason == "stop":
            jsonschema.validate(json.loads(sample.text), schema)


_PROPERTY = dict(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])


@settings(max_examples=12, **_PROPERTY)
@given(schema=SCHEMAS, max_tokens=st.integers(5, 80), seed=st.integers(0, 2**16))
def test_property_outputs_validate(llm: Any, tokenizer: Any, schema: dict[str, Any],
                                   max_tokens: int, seed: int) -> None:
    _check_property(llm, tokenizer, schema, max_tokens, seed)


@pytest.mark.slow  # ~3.5 min on the shared 2-core machine (load 5)
@settings(max_examples=150, **_PROPERTY)
@given(schema=SCHEMAS, max_tokens=st.integers(5, 80), seed=st.integers(0, 2**16))
def test_property_outputs_validate_many(llm: Any, tokenizer: Any, schema: dict[str, Any],
                                        max_tokens: int, seed: int) -> None:
    _check_property(llm, tokenizer, schema, max_tokens, seed)


def test_max_tokens_below_the_smallest_output_is_refused(llm: Any) -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"customer_full_name": {"type": "string"},
                                               "preferred_contact_method": {"enum": ["email"]}},
              "required": ["customer_full_name", "preferred_contact_method"]}
    params = SamplingParams(max_tokens=5, structured_outputs=_so(
        json=schema, complete_before_max_tokens=True))
    with pytest.raises(ValueError, match="max_tokens=5 is too small"):
        llm.generate([PROMPT], params, use_tqdm=False)
    # the engine carries on; without the option the same request is answered, cut
    params = SamplingParams(max_tokens=5, structured_outputs=_so(json=schema))
    out = llm.generate([PROMPT], params, use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 5


@pytest.mark.parametrize("max_tokens", [24, 40])
def test_tool_call_completed_before_max_tokens(llm: Any, max_tokens: int) -> None:
    """tool_choice required with the option: a call cut by max_tokens is completed (at 40
    tokens the demo model starts a second call that cannot fit: it ends after the first)."""
    from thinkgate.engine.demo.data import TOOLS

    tools = [TOOLS["get_weather"], TOOLS["get_time"]]
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=max_tokens,
                            structured_outputs=_so(complete_before_max_tokens=True))
    outs = llm.chat([[{"role": "user", "content": "Weather in Paris and the time?"}]],
                    params, tools=tools, tool_choice="required",
                    chat_template_kwargs={"enable_thinking": False}, use_tqdm=False)
    for out in outs:
        calls = out.message["tool_calls"]
        assert calls, out.message
        for call in calls:
            schema = TOOLS[call["function"]["name"]]["function"]["parameters"]
            jsonschema.validate(json.loads(call["function"]["arguments"]), schema)



@pytest.mark.parametrize("parser", ["hermes", "qwen3_coder", "glm45", "minimax_m2", "step3",
                                    "kimi_k2", "pythonic"])
def test_a_plan_from_the_start_of_each_tool_format(tokenizer: Any, parser: str) -> None:
    """A required call's grammar has a completion from its start: special-token markers
    (`<tool_call>` in the demo vocabulary, which llguidance forces as token references) and
    values that are free text closed by a tag (qwen3_coder's `\n</parameter>`) included. Before,
    the planner gave up on these from the start and a call cut by max_tokens stayed cut."""
    from thinkgate.engine.demo.data import TOOLS
    from thinkgate.engine.structured.completion_search import tag_closers
    from thinkgate.engine.structured.grammar import Grammar
    from thinkgate.engine.structured.tool_constraints import chat_constraint

    constraint = chat_constraint(parser, [TOOLS["get_weather"], TOOLS["get_time"]], "required",
                                 None)
    g = Grammar(tokenizer, -(-len(tokenizer) // 64) * 64, [tokenizer.eos_token_id],
                max_num_seqs=1)
    row = g.new_request(constraint)
    assert row.backend == "guidance"
    planner = CompletionPlanner(lambda t: tokenizer.encode(t, add_special_tokens=False),
                                lambda i: tokenizer.decode([i]), stop_id=tokenizer.eos_token_id,
                                closers=tag_closers(constraint.structural_tag))
    planner.start(row.matcher)
    assert not planner.gave_up and planner.plan
    for token in planner.plan:  # the plan is the grammar's whole output
        assert row.matcher.accept_token(token)
    assert row.matcher.is_completed()
    g.close()


def test_a_cut_xml_value_is_closed(tokenizer: Any) -> None:
    from thinkgate.engine.demo.data import TOOLS
    from thinkgate.engine.structured.completion_search import tag_closers
    from thinkgate.engine.structured.grammar import Grammar
    from thinkgate.engine.structured.tool_constraints import chat_constraint

    constraint = chat_constraint("qwen3_coder", [TOOLS["get_time"]], "required", None)
    g = Grammar(tokenizer, -(-len(tokenizer) // 64) * 64, [tokenizer.eos_token_id],
                max_num_seqs=1)
    row = g.new_request(constraint)
    assert row.matcher.accept_string("<tool_call><function=get_time><parameter=city>\nNew Yo")
    text = shortest_completion(row.matcher, closers=tag_closers(constraint.structural_tag))
    assert text == "\n</parameter></function></tool_call>"
    assert shortest_completion(row.matcher) is None  # without the closers: none found
    g.close()
