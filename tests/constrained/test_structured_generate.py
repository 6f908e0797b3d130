"""Structured outputs on the demo model: every sampled output follows its constraint."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.api.chat import chat_layer_for
from thinkgate.engine.demo.data import TOOLS
from thinkgate.engine.structured.grammar import RequestGrammar

# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "additionalProperties": False, "properties": {  # nested object
        "user": {"type": "object", "additionalProperties": False, "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"]},
        "active": {"type": "boolean"}}, "required": ["user", "active"]},
    {"type": "object", "additionalProperties": False, "properties": {  # enum + bounded array
        "color": {"enum": ["red", "green", "blue"]},
        "sizes": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9},
                  "minItems": 1, "maxItems": 3}}, "required": ["color", "sizes"]},
    {"type": "object", "additionalProperties": False, "properties": {  # numbers
        "x": {"type": "number", "minimum": -10, "maximum": 10},
        "y": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["x", "y"]},
    {"type": "object", "additionalProperties": False, "properties": {  # pattern + array of short strings
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2}$"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
        "required": ["code", "tags"]},
]

# thinking already closed (what `enable_thinking: false` renders): constrained from token one
PROMPT = ("<|im_start|>user\nDescribe it as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")


def _params(seed: int, max_tokens: int = 96, **so: Any) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens,
                          structured_outputs=StructuredOutputsParams(**so))


def test_32_json_schema_generations_at_temperature_1_all_validate(llm: Any) -> None:
    params = [_params(i, json=SCHEMAS[i % len(SCHEMAS)]) for i in range(32)]
    outs = llm.generate([PROMPT] * 32, params, use_tqdm=False)
    for i, out in enumerate(outs):
        sample = out.outputs[0]
        assert sample.finish_reason == "stop", (i, sample.text)
        jsonschema.validate(json.loads(sample.text), SCHEMAS[i % len(SCHEMAS)])


def test_regex_choice_and_ebnf(llm: Any) -> None:
    ebnf = 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [a-z] | [0-9][0-9]'
    choices = ["sunny", "rainy", 'a "quoted" one']
    params = ([_params(i, regex=r"[A-Z][a-z]{2,5} [0-9]{1,3}") for i in range(8)]
              + [_params(i, choice=choices) for i in range(8)]
              + [_params(i, grammar=ebnf, max_tokens=32) for i in range(8)])
    outs = [o.outputs[0] for o in llm.generate([PROMPT] * 24, params, use_tqdm=False)]
    for o in outs[:8]:
        assert re.fullmatch(r"[A-Z][a-z]{2,5} [0-9]{1,3}", o.text), o.text
    for o in outs[8:16]:
        assert o.text in choices and o.finish_reason == "stop"
    for o in outs[16:]:
        assert o.finish_reason == "stop"
        assert re.fullmatch(r"\((?:[a-z]|[0-9]{2})(?:,(?:[a-z]|[0-9]{2})){0,3}\)", o.text), o.text


def test_json_object_gives_an_object(llm: Any) -> None:
    # a prompt that offers tools (thinking off): the demo model then writes JSON it can finish
    request = chat_layer_for(llm).prepare(
        [{"role": "user", "content": "What's the weather in Paris?"}], tools=list(TOOLS.values()),
        chat_template_kwargs={"enable_thinking": False})
    outs = [o.outputs[0] for o in llm.generate(
        [request.prompt_token_ids] * 6, [_params(i, max_tokens=120, json_object=True)
                                         for i in range(6)], use_tqdm=False)]
    finished = [o for o in outs if o.finish_reason == "stop"]
    assert len(finished) >= 4, [o.text for o in outs]  # free-form strings may run on and be cut
    for o in finished:
        assert isinstance(json.loads(o.text), dict)
    for o in outs:
        assert o.text.startswith("{")


@pytest.mark.triton_path
def test_a_bad_schema_fails_only_its_request(llm: Any) -> None:
    engine = llm.llm_engine
    engine.add_request("good-1", PROMPT, _params(1, json=SCHEMAS[1]))
    with pytest.raises(ValueError, match="structured_outputs"):
        engine.add_request("bad", PROMPT, _params(2, json={"type": "object",
                                                           "required": "not-a-list"}))
    engine.add_request("good-2", PROMPT, _params(3, regex="[0-9]{4}"))
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    assert set(done) == {"good-1", "good-2"}
    jsonschema.validate(json.loads(done["good-1"].text), SCHEMAS[1])
    assert re.fullmatch("[0-9]{4}", done["good-2"].text)


class _RejectingMatcher:
    """The row's real matcher (so the mask is real) but it rejects every token: a grammar bug."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def accept_token(self, token_id: int) -> bool:
        return False


def test_a_matcher_rejecting_a_token_ends_only_that_request(llm: Any) -> None:
    engine = llm.llm_engine
    params = _params(1, regex="[0-9]{6}")
    # compiled before the adds: a compile slower than a few ms (a loaded machine) would park
    # the request off `engine.requests` (engine/structured/compiling.py)
    engine.structured_output.prefetch(params).result(timeout=60)
    engine.add_request("victim", PROMPT, params)
    engine.add_request("bystander", PROMPT, _params(2, regex="[0-9]{6}"))
    victim = engine.requests["victim"].seqs[0].structured_state
    assert isinstance(victim, RequestGrammar)
    victim.matcher = _RejectingMatcher(victim.matcher)
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    assert done["victim"].finish_reason == "abort"
    assert "rejected" in str(done["victim"].stop_reason)
    assert len(done["victim"].token_ids) == 1
    assert done["bystander"].finish_reason == "stop"
    assert re.fullmatch("[0-9]{6}", done["bystander"].text)
