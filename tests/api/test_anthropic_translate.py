"""The Anthropic translator without a server: requests → chat-layer arguments, deltas → events."""

from __future__ import annotations

import asyncio
import json

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter, ValidationError
from thinkgate.api.anthropic.errors import (
    anthropic_error,
    anthropic_error_event,
    anthropic_error_response,
)
from thinkgate.api.anthropic.events import BlockWriter, fold, stop_fields
from thinkgate.api.anthropic.protocol import MessagesRequest
from thinkgate.api.anthropic.translate import chat_args
from thinkgate.api.errors import APIError
from thinkgate.api.server.helpers import stream_response

DELTAS = [
    {"reasoning": "Let me "}, {"reasoning": "think."}, {"content": "Calling."},
    {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                     "function": {"name": "get_time", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]},
    {"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{}"}}]},
]
START = {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 0}}}
END = {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
       "usage": {"output_tokens": 9}}


def _events(deltas: list[dict], chunk: int, omit: bool = False) -> list[dict]:
    writer = BlockWriter(omit_thinking=omit)
    events = [START]
    for i in range(0, len(deltas), chunk):
        events += writer.feed(deltas[i:i + chunk])
    return [*events, *writer.close(), END, {"type": "message_stop"}]


@pytest.mark.parametrize("chunk", [1, 3, len(DELTAS)])
def test_blocks_fold_as_the_anthropic_client_folds_them(chunk: int) -> None:
    events = _events(DELTAS, chunk)
    message = fold(events)
    content = message["content"]
    assert [b["type"] for b in content] == ["thinking", "text", "tool_use", "tool_use"]
    assert content[0]["thinking"] == "Let me think." and content[0]["signature"]
    assert content[1] == {"type": "text", "text": "Calling."}
    assert content[2] == {"type": "tool_use", "id": "call_a", "name": "get_time",
                          "input": {"city": "Oslo"}}
    assert content[3] == {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {}}
    assert (message["stop_reason"], message["usage"]) == ("tool_use",
                                                          {"input_tokens": 3, "output_tokens": 9})
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == [0, 1, 2, 3]
    adapter = TypeAdapter(RawMessageStreamEvent)  # the official client's own accumulation
    snapshot, bufs = None, {}
    for event in events:
        snapshot = accumulate_event(event=adapter.validate_python(event),
                                    current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot.model_dump(exclude_none=True)["content"] == content


def test_omitted_thinking_keeps_the_block_and_signature() -> None:
    content = fold(_events(DELTAS[:3], 1, omit=True))["content"]
    assert content[0]["thinking"] == "" and content[0]["signature"]
    assert content[1]["text"] == "Calling."


def test_tool_input_that_is_not_an_object_is_kept() -> None:
    deltas = [{"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f",
                                                                  "arguments": "[1, 2]"}}]}]
    assert fold(_events(deltas, 1))["content"][0]["input"] == {"arguments": "[1, 2]"}


@pytest.mark.parametrize(("finish", "reason", "stops", "expected"), [
    ("tool_calls", None, None, ("tool_use", None)),
    ("length", None, ["END"], ("max_tokens", None)),
    ("stop", "END", ["x", "END"], ("stop_sequence", "END")),
    ("stop", 151645, ["END"], ("end_turn", None)),  # an EOS / stop token id
    ("stop", None, None, ("end_turn", None)),
])
def test_stop_fields(finish, reason, stops, expected) -> None:
    assert stop_fields(finish, reason, stops) == expected


def _req(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 8, **fields})


HI = [{"role": "user", "content": "hi"}]
TOOL = {"name": "get_time", "input_schema": {"properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    (None, "auto", True),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ({"type": "any"}, "required", True),
    ({"type": "none"}, "none", True),
    ({"type": "tool", "name": "get_time"}, {"type": "function", "function": {"name": "get_time"}},
     True),
])
def test_tool_choice(choice, expected, parallel) -> None:
    args = chat_args(_req(messages=HI, tools=[TOOL], tool_choice=choice))
    assert (args.tool_choice, args.parallel_tool_calls) == (expected, parallel)
    assert args.tools == [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_thinking_switch_and_budget() -> None:
    on = chat_args(_req(messages=HI, thinking={"type": "enabled", "budget_tokens": 50}))
    assert on.chat_template_kwargs == {"enable_thinking": True, "thinking": True}
    assert on.thinking_token_budget == 50
    off = chat_args(_req(messages=HI, thinking={"type": "disabled"},
                         chat_template_kwargs={"thinking": True}))
    assert off.chat_template_kwargs == {"enable_thinking": False, "thinking": True}
    assert off.thinking_token_budget is None
    adaptive = chat_args(_req(messages=HI, thinking={"type": "adaptive"}))
    assert (adaptive.chat_template_kwargs, adaptive.thinking_token_budget) == ({}, None)


def test_conversation_messages() -> None:
    messages = [
        {"role": "system", "content": "B."},
        {"role": "user", "content": [{"type": "text", "text": "Time in Oslo?",
                                      "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Call it.", "signature": "s"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "tool_use", "id": "t1", "name": "get_time", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": [{"type": "text", "text": "9:00"}, {"type": "text", "text": "CET"}]},
            {"type": "text", "text": "And now?"}]},
    ]
    args = chat_args(_req(system=[{"type": "text", "text": "A."}], messages=messages))
    assert args.messages == [
        {"role": "system", "content": "A.B."},
        {"role": "user", "content": "Time in Oslo?"},
        {"role": "assistant", "content": "", "reasoning": "Call it.", "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "get_time", "arguments": json.dumps({"city": "Oslo"})}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "9:00\nCET"},
        {"role": "user", "content": "And now?"},
    ]


def test_output_config() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    args = chat_args(_req(messages=HI, output_config={"effort": "low", "format": {
        "type": "json_schema", "schema": schema}}))
    assert args.reasoning_effort == "low"
    assert args.response_format["json_schema"]["schema"] == schema


@pytest.mark.parametrize(("messages", "words"), [
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, {
        "type": "image", "source": {"type": "base64", "data": ""}}]}],
     "messages[0].content[1]: content blocks of type 'image'"),
    ([{"role": "user", "content": []}], "messages[0].content must not be an empty list"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
     "messages[0].content[0]: a tool_use block needs `id`"),
    ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
     "type 'tool_result'"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image"}]}]}], "messages[0].content[0].content[0]"),
])
def test_unusable_blocks_name_their_position(messages, words) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        chat_args(_req(messages=messages))


@pytest.mark.parametrize("fields", [
    {"messages": HI, "max_tokens": 0},
    {"messages": [], "max_tokens": 8},
    {"messages": HI, "max_tokens": 8, "tool_choice": {"type": "tool"}},
    {"messages": HI, "max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 0}},
    {"messages": [{"role": "tool", "content": "x"}], "max_tokens": 8},
    {"messages": HI, "max_tokens": 8, "stop_sequences": ["a", ""]},
])
def test_request_validation(fields) -> None:
    with pytest.raises(ValidationError):
        MessagesRequest.model_validate({"model": "m", **fields})


@pytest.mark.parametrize(("exc", "status", "kind"), [
    (APIError("bad"), 400, "invalid_request_error"),
    (APIError("key", status_code=401), 401, "authentication_error"),
    (APIError("model", status_code=404), 404, "not_found_error"),
    (APIError("full", status_code=429, type="rate_limit_error"), 429, "rate_limit_error"),
    (ValueError("bad value"), 400, "invalid_request_error"),
    (RuntimeError("bug"), 500, "api_error"),
])
def test_error_shape(exc, status, kind) -> None:
    got_status, body = anthropic_error(exc)
    assert got_status == status and body["type"] == "error"
    assert body["error"]["type"] == kind and set(body["error"]) == {"type", "message"}


def test_stream_errors_are_error_events_without_done() -> None:
    async def outputs():
        yield "first"
        raise APIError("engine said no")

    async def events(first, rest):
        yield f"event: ping\ndata: {json.dumps({'type': 'ping', 'got': first})}\n\n"
        async for item in rest:
            yield item

    async def body() -> list[str]:
        response = await stream_response(outputs(), events, on_error=anthropic_error_response,
                                         on_stream_error=anthropic_error_event, done=None)
        return [chunk async for chunk in response.body_iterator]

    chunks = asyncio.run(body())
    assert chunks[0].startswith("event: ping\n")
    name, data = chunks[-1].strip().split("\n")
    assert name == "event: error" and len(chunks) == 2
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "error", "error": {"type": "invalid_request_error", "message": "engine said no"}}
