"""Structured outputs on a live `thinkgate serve` (demo model): completion before max_tokens,
unenforceable keywords as 400s, best effort, reasoning_effort none."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
from thinkgate.engine.demo.data import TOOLS

MODEL = "thinkgate-demo"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def _chat(http, **body) -> dict:
    r = http.post("/v1/chat/completions", json={"model": MODEL, **body}, timeout=600)
    return {"status": r.status_code, **r.json()}


def test_20_required_tool_calls_with_completion_all_validate(http) -> None:
    tools = [TOOLS["get_weather"], TOOLS["get_time"]]
    body = {"messages": [{"role": "user", "content": "Weather in Paris and the time in Rome?"}],
            "tools": tools, "tool_choice": "required", "temperature": 1.0, "max_tokens": 40,
            "structured_outputs": {"complete_before_max_tokens": True}, **NO_THINK}
    with ThreadPoolExecutor(max_workers=20) as pool:
        outs = list(pool.map(lambda seed: _chat(http, seed=seed, **body), range(20)))
    for out in outs:
        assert out["status"] == 200, out
        choice = out["choices"][0]
        calls = choice["message"].get("tool_calls")
        assert calls, choice
        for call in calls:
            schema = TOOLS[call["function"]["name"]]["function"]["parameters"]
            jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
        if choice["finish_reason"] == "length":
            assert choice["stop_reason"] == "completed_at_max_tokens"


def test_response_format_completed_at_max_tokens(http) -> None:
    schema = {"type": "object", "properties": {"note": {"type": "string"},
                                               "n": {"type": "integer"}},
              "required": ["note", "n"]}
    out = _chat(http, messages=[{"role": "user", "content": "A note as JSON."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "x", "schema": schema}},
                max_tokens=12, temperature=1.0, seed=1,
                structured_outputs={"complete_before_max_tokens": True}, **NO_THINK)
    assert out["status"] == 200, out
    choice = out["choices"][0]
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)
    assert choice["finish_reason"] == "length"
    assert choice["stop_reason"] == "completed_at_max_tokens"


def test_max_tokens_too_small_for_the_completion_is_a_400(http) -> None:
    schema = {"type": "object", "properties": {"customer_full_name": {"type": "string"},
                                               "preferred_contact_method": {"enum": ["email"]}},
              "required": ["customer_full_name", "preferred_contact_method"]}
    body = {"messages": [{"role": "user", "content": "A contact as JSON."}], "max_tokens": 4,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "x", "schema": schema}}, **NO_THINK}
    out = _chat(http, structured_outputs={"complete_before_max_tokens": True}, **body)
    assert out["status"] == 400, out
    assert "max_tokens=4 is too small for complete_before_max_tokens" in out["error"]["message"]
    out = _chat(http, **body)  # without the option: answered, cut
    assert out["status"] == 200 and out["choices"][0]["finish_reason"] == "length", out


def test_unenforced_keyword_is_a_400_naming_it(http) -> None:
    schema = {"type": "object", "properties": {"tags": {
        "type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}
    body = {"messages": [{"role": "user", "content": "Tags as JSON."}], "max_tokens": 16,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "x", "schema": schema}}, **NO_THINK}
    out = _chat(http, **body)
    assert out["status"] == 400, out
    assert "uniqueItems at /properties/tags" in out["error"]["message"]
    assert out["error"]["param"] == "response_format"
    out = _chat(http, structured_outputs={"best_effort": True}, **body)
    assert out["status"] == 200, out
    assert out["unenforced_keywords"] == [
        "response_format: uniqueItems at /properties/tags (arrays may repeat items)"]
    bad = {"type": "object", "properties": {"a": {"type": "string", "not": {"enum": ["x"]}}}}
    out = _chat(http, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                structured_outputs={"json": bad})
    assert out["status"] == 400 and "not at /properties/a" in out["error"]["message"], out
    # xgrammar does not enforce patternProperties, llguidance does: `auto` compiles it there
    keyed = {"type": "object", "patternProperties": {"^x": {"type": "integer"}},
             "additionalProperties": False}
    out = _chat(http, messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                structured_outputs={"json": keyed, "complete_before_max_tokens": True},
                chat_template_kwargs={"enable_thinking": False})  # all 24 tokens for the JSON
    assert out["status"] == 200, out
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), keyed)


def test_reasoning_effort_none_turns_thinking_off(http) -> None:
    r = http.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "What is 2 + 2?"}],
        "max_tokens": 24, "temperature": 0, "reasoning_effort": "none"})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert not message.get("reasoning"), message  # the template closed thinking in the prompt
    tok = http.post("/tokenize", json={
        "model": MODEL, "messages": [{"role": "user", "content": "What is 2 + 2?"}],
        "chat_template_kwargs": {"enable_thinking": False}})
    assert tok.status_code == 200
    assert r.json()["usage"]["prompt_tokens"] == tok.json()["count"]


def _nested(kind: str, depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = ({"oneOf": [schema, {"type": "string"}]} if kind == "oneOf"
                  else {"type": "array", "items": schema})
    return schema


def test_hostile_nesting_is_a_400_naming_the_limit_and_the_server_keeps_serving(http) -> None:
    ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **NO_THINK}
    for kind, depth in (("oneOf", 60), ("array", 400)):
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": _nested(kind, depth)}}
        out = _chat(http, response_format=fmt, **ask)
        assert out["status"] == 400, out
        assert "nests deeper than 64 levels" in out["error"]["message"], out
        tool = {"type": "function", "function": {"name": "deep", "parameters": {
            "type": "object", "properties": {"x": _nested(kind, depth)}}}}
        out = _chat(http, tools=[tool], tool_choice="required", **ask)
        assert out["status"] == 400, out
        assert "tools[deep].parameters nests deeper than 64" in out["error"]["message"], out
    assert _chat(http, **ask)["status"] == 200


def test_required_call_with_an_unknown_format_and_extra_keys_is_served(http) -> None:
    # BFCL writes "format": "float" (no JSON Schema format: an annotation); the schema leaves
    # its object open, so keys it does not list are valid too
    tool = {"type": "function", "function": {"name": "area", "parameters": {
        "type": "object", "properties": {"radius": {"type": "number", "format": "float"}},
        "required": ["radius"]}}}
    out = _chat(http, messages=[{"role": "user", "content": "Area of a circle of radius 2?"}],
                tools=[tool], tool_choice="required", max_tokens=48, temperature=1.0, seed=3,
                structured_outputs={"complete_before_max_tokens": True}, **NO_THINK)
    assert out["status"] == 200, out
    [call] = out["choices"][0]["message"]["tool_calls"][:1]
    args = json.loads(call["function"]["arguments"])
    jsonschema.validate(args, tool["function"]["parameters"])
