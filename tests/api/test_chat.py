"""/v1/chat/completions on a live `thinkgate serve` (the demo model) with the openai client."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from thinkgate.engine.demo.data import TOOLS

MODEL = "thinkgate-demo"
WEATHER = TOOLS["get_weather"]
TIME = TOOLS["get_time"]
ASK_WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]


def _check_args(call, tool) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


def test_plain_chat(client) -> None:
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=48, temperature=0)
    assert out.object == "chat.completion"
    choice = out.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.content or choice.message.reasoning
    usage = out.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert 0 <= usage.completion_tokens_details.reasoning_tokens <= usage.completion_tokens


def test_reasoning_fields(client) -> None:
    out = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, max_tokens=64,
                                         temperature=0)
    msg = out.choices[0].message.model_dump()
    assert msg["reasoning"] and msg["reasoning_content"] == msg["reasoning"]
    assert out.usage.completion_tokens_details.reasoning_tokens > 0
    off = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=32,
        temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.choices[0].message.model_dump().get("reasoning") is None
    assert off.choices[0].message.content
    hidden = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, max_tokens=64,
                                            temperature=0, extra_body={"include_reasoning": False})
    assert hidden.choices[0].message.model_dump().get("reasoning") is None


def test_streaming_matches_non_streaming(client) -> None:
    kwargs = dict(model=MODEL, messages=ASK_WEATHER, max_tokens=64, temperature=0,
                  tools=[WEATHER])
    full = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    choice_chunks = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in choice_chunks][:-1] == [None] * (
        len(choice_chunks) - 1)
    assert choice_chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning", None) or ""
                        for c in choice_chunks)
    assert reasoning == (full.choices[0].message.model_dump()["reasoning"] or "")
    content = "".join(c.choices[0].delta.content or "" for c in choice_chunks)
    assert content == (full.choices[0].message.content or "")
    args = "".join(tc.function.arguments or "" for c in choice_chunks
                   for tc in c.choices[0].delta.tool_calls or [])
    assert args == "".join(tc.function.arguments for tc in full.choices[0].message.tool_calls or [])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        full.usage.completion_tokens


def test_auto_tool_call(client) -> None:
    out = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME],
                                         max_tokens=96, temperature=0)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert _check_args(call, WEATHER)["city"]  # the tiny model may pick another city


NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize("tool_choice, extra", [
    ("required", {"thinking_token_budget": 24}),  # the budget closes the thinking
    (NAMED, {"thinking_token_budget": 24}),
    (NAMED, {"chat_template_kwargs": {"enable_thinking": False}}),
])
def test_required_and_named_tool_choice(client, tool_choice, extra) -> None:
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a joke."}],
        tools=[WEATHER, TIME], tool_choice=tool_choice, max_tokens=160, temperature=0,
        extra_body=extra)
    calls = out.choices[0].message.tool_calls
    assert calls, out.choices[0].message
    for call in calls:
        tool = TOOLS[call.function.name]
        _check_args(call, tool)
    if isinstance(tool_choice, dict):
        assert [c.function.name for c in calls] == ["get_time"]


def test_json_schema_response_format(client) -> None:
    # bounded values, so even a tiny model's answer ends within max_tokens
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lyon", "Nice"]},
                                               "is_capital": {"type": "boolean"}},
              "required": ["city", "is_capital"], "additionalProperties": False}
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
        max_tokens=160, temperature=0, extra_body={"thinking_token_budget": 24})
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)


def test_tools_and_response_format_together(client) -> None:
    # closed and bounded: with its thinking cut by the budget mid-word ("I will call get_"), the
    # tiny demo model (v3) answers in JSON and an open schema's free text and extra keys let it
    # ramble to max_tokens; without the budget it calls get_weather
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40}},
              "required": ["answer"], "additionalProperties": False}
    out = client.chat.completions.create(
        model=MODEL, messages=ASK_WEATHER, tools=[WEATHER], max_tokens=160, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        extra_body={"thinking_token_budget": 24})
    assert out.choices[0].finish_reason in ("stop", "tool_calls")
    msg = out.choices[0].message
    if msg.tool_calls:
        _check_args(msg.tool_calls[0], WEATHER)
    else:
        jsonschema.validate(json.loads(msg.content), schema)


def test_n_and_logprobs(client) -> None:
    out = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, n=2, max_tokens=8,
                                         temperature=1.0, seed=3, logprobs=True, top_logprobs=2)
    assert sorted(c.index for c in out.choices) == [0, 1]
    for c in out.choices:
        items = c.logprobs.content
        assert len(items) == 8 or c.finish_reason != "length"
        for item in items:
            assert item.logprob <= 0 and len(item.top_logprobs) == 2
            assert item.top_logprobs[0].logprob >= item.top_logprobs[1].logprob
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, n=2,
                                                 max_tokens=8, stream=True, logprobs=True))
    finished = {c.choices[0].index: c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason}
    assert sorted(finished) == [0, 1]
    streamed = [lp for c in chunks if c.choices and c.choices[0].logprobs
                for lp in c.choices[0].logprobs.content]
    assert 2 <= len(streamed) <= 16 and all(lp.logprob <= 0 for lp in streamed)


def test_multi_turn_with_tool_result(client) -> None:
    messages = ASK_WEATHER + [
        {"role": "assistant", "content": None, "reasoning_content": "I should call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {
             "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18}"},
    ]
    out = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER],
                                         max_tokens=64, temperature=0)
    assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # malformed historical arguments must not break preprocessing (vLLM #43995)
    messages[1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    again = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER],
                                           max_tokens=4)
    assert again.choices


BAD = [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tools": []}, "tools"),
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "response_format"),
    ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"temperature": 5}, "temperature"),
    ({"frobnicate": True}, "frobnicate"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi " * 5000}]}, "messages"),
]


@pytest.mark.parametrize("patch, param", BAD)
def test_bad_requests_are_400(http, patch, param) -> None:
    body = {"model": MODEL, "messages": ASK_WEATHER, "max_tokens": 4, **patch}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert http.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK_WEATHER,
                                                   "max_tokens": 2}).status_code == 200


def test_context_length_and_stream_errors(client) -> None:
    long = [{"role": "user", "content": "hi " * 5000}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=long, max_tokens=4, stream=True)
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=ASK_WEATHER, max_tokens=2)


def test_malformed_json_body(http) -> None:
    for raw in (b"{", b"[1, 2]", b"", "{\"messages\": \"\u00e9".encode()):
        r = http.post("/v1/chat/completions", content=raw,
                      headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


ODD = [
    {"messages": [{"role": "user", "content": 7}]},
    {"messages": [{"role": "user"}]},
    {"messages": [{"role": "tool", "content": "x"}]},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": [1, "x"]}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
    {"messages": "hello"},
    {"tools": [{"type": "function"}]},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": "nope"}}]},
    {"tool_choice": "sometimes", "tools": [WEATHER]},
    {"tool_choice": "required"},
    {"response_format": {"type": "yaml"}},
    {"response_format": {"type": "json_schema"}},
    {"logit_bias": {"abc": 1}},
    {"logit_bias": {"5": 1000}},
    {"logit_bias": {"99999999": 1}},
    {"stop": ["a", "b", "c", "d", "e"]},
    {"n": 0},
    {"seed": "seven"},
    {"stream_options": {"include_usage": True}},
    {"max_completion_tokens": 0},
    {"top_p": 0},
    {"reasoning_effort": "extreme"},
    {"thinking_token_budget": -1},
    {"stop_token_ids": [10**9]},
    {"structured_outputs": {"json": {"type": "object"}, "regex": "a+"}},
    {"structured_outputs": {"grammar": "root ::= ("}},
    {"chat_template": "{% for %}"},
    {"chat_template_kwargs": "yes"},
]


@pytest.mark.parametrize("patch", ODD)
def test_odd_requests_are_400_never_500(http, patch) -> None:
    body = {"model": MODEL, "messages": ASK_WEATHER, "max_tokens": 4, **patch}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    if "stream_options" not in patch:  # with stream: true, stream_options is valid
        stream = http.post("/v1/chat/completions", json={**body, "stream": True})
        assert stream.status_code == 400, stream.text


def test_deeply_nested_body(http) -> None:
    raw = b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    r = http.post("/v1/chat/completions", content=raw,
                  headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert http.get("/health").status_code == 200


def test_tool_choice_none_and_parallel_false(client) -> None:
    none = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=[WEATHER],
                                          tool_choice="none", max_tokens=96, temperature=0)
    assert not none.choices[0].message.tool_calls
    assert none.choices[0].finish_reason in ("stop", "length")
    one = client.chat.completions.create(
        model=MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="required",
        parallel_tool_calls=False, max_tokens=160, temperature=0,
        extra_body={"thinking_token_budget": 24})
    assert len(one.choices[0].message.tool_calls) == 1
