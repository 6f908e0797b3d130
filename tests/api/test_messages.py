"""/v1/messages (Anthropic) on a live `thinkgate serve` (the demo model) with the anthropic client."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pytest
from thinkgate.engine.demo.data import TOOLS

MODEL = "thinkgate-demo"
ASK_WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]
GREEDY = {"temperature": 0}  # the anthropic client has no temperature argument any more


def _tool(name: str) -> dict:
    fn = TOOLS[name]["function"]
    return {"name": name, "description": fn["description"], "input_schema": fn["parameters"]}


WEATHER, TIME = _tool("get_weather"), _tool("get_time")


@pytest.fixture(scope="module")
def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0, timeout=60)


def _blocks(message, kind: str) -> list:
    return [b for b in message.content if b.type == kind]


def _comparable(message) -> list[dict]:
    """The content without what is random per answer (thinking signatures, tool_use ids)."""
    return [{k: v for k, v in b.model_dump(exclude_none=True).items()
             if k not in ("signature", "id")} for b in message.content]


def test_tool_use_block_validates(claude) -> None:
    out = claude.messages.create(model=MODEL, max_tokens=96, messages=ASK_WEATHER,
                                 tools=[WEATHER, TIME], extra_body=GREEDY)
    assert out.type == "message" and out.role == "assistant" and out.id.startswith("msg_")
    calls = _blocks(out, "tool_use")
    assert calls and out.stop_reason == "tool_use"
    by_name = {"get_weather": WEATHER, "get_time": TIME}
    for call in calls:
        jsonschema.validate(call.input, by_name[call.name]["input_schema"])
        assert call.id
    assert out.usage.input_tokens > 0 and out.usage.output_tokens > 0
    assert out.usage.output_tokens_details.thinking_tokens <= out.usage.output_tokens


def test_thinking_enabled_and_disabled(claude) -> None:
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    on = claude.messages.create(model=MODEL, max_tokens=64, messages=ask, extra_body=GREEDY,
                                thinking={"type": "enabled", "budget_tokens": 6})
    thinking = _blocks(on, "thinking")
    assert len(thinking) == 1 and thinking[0].thinking and thinking[0].signature
    assert on.content[0].type == "thinking"
    assert 0 < on.usage.output_tokens_details.thinking_tokens <= 6  # the budget holds
    off = claude.messages.create(model=MODEL, max_tokens=48, messages=ask, extra_body=GREEDY,
                                 thinking={"type": "disabled"})
    assert not _blocks(off, "thinking") and _blocks(off, "text")[0].text
    assert off.usage.output_tokens_details.thinking_tokens == 0


@pytest.mark.parametrize("tools", [[WEATHER], None], ids=["tool_use", "text"])
def test_stream_collects_the_same_message(claude, server, tools) -> None:
    kwargs = dict(model=MODEL, max_tokens=64, messages=ASK_WEATHER, extra_body=GREEDY,
                  **({"tools": tools} if tools else {}))
    full = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    assert _comparable(streamed) == _comparable(full)
    assert (streamed.stop_reason, streamed.usage.input_tokens, streamed.usage.output_tokens) == \
        (full.stop_reason, full.usage.input_tokens, full.usage.output_tokens)
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert "thinking_delta" in deltas and "signature_delta" in deltas
    assert ("input_json_delta" if tools else "text_delta") in deltas
    raw = [e.type for e in events if e.type in (
        "message_start", "content_block_start", "content_block_stop", "message_delta",
        "message_stop")]
    assert raw[0] == "message_start" and raw[-2:] == ["message_delta", "message_stop"]
    assert raw.count("content_block_start") == raw.count("content_block_stop") == \
        len(full.content)
    with httpx.stream("POST", f"{server.base}/v1/messages",
                      json={**kwargs.pop("extra_body"), **kwargs, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[0] == "event: message_start" and "[DONE]" not in "".join(lines)


def test_tool_choice(claude) -> None:
    hello = [{"role": "user", "content": "Say hello."}]
    quick = {"thinking": {"type": "disabled"}, "extra_body": GREEDY}  # fewer tokens to wait for
    forced = claude.messages.create(model=MODEL, max_tokens=96, messages=hello,
                                    tools=[WEATHER, TIME], tool_choice={"type": "any"}, **quick)
    assert _blocks(forced, "tool_use") and forced.stop_reason == "tool_use"
    named = claude.messages.create(
        model=MODEL, max_tokens=96, messages=ASK_WEATHER, tools=[WEATHER, TIME],
        tool_choice={"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
        **quick)
    calls = _blocks(named, "tool_use")
    assert [c.name for c in calls] == ["get_time"]
    jsonschema.validate(calls[0].input, TIME["input_schema"])
    none = claude.messages.create(model=MODEL, max_tokens=48, messages=ASK_WEATHER,
                                  tools=[WEATHER], tool_choice={"type": "none"},
                                  extra_body=GREEDY)
    assert not _blocks(none, "tool_use") and none.stop_reason in ("end_turn", "max_tokens")


def test_stop_sequence(claude) -> None:
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    kwargs = dict(model=MODEL, max_tokens=48, messages=ask, extra_body=GREEDY,
                  thinking={"type": "disabled"})
    text = _blocks(claude.messages.create(**kwargs), "text")[0].text
    word = text.split()[2]
    cut = claude.messages.create(**kwargs, stop_sequences=["zzzz", word])
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", word)
    assert _blocks(cut, "text")[0].text == text[: text.index(word)]


def _openai_count(http: httpx.Client, messages: list[dict], tools: list | None = None) -> int:
    body: dict = {"messages": messages}
    if tools:
        body["tools"] = [TOOLS[t["name"]] for t in tools]
    return http.post("/tokenize", json=body).json()["count"]


def test_system_and_tool_result_render_like_openai(claude, http) -> None:
    """count_tokens of an Anthropic conversation == /tokenize of the same OpenAI messages."""
    system = "You are a weather bot."
    for form in (system, [{"type": "text", "text": "You are a "}, {"type": "text",
                                                                    "text": "weather bot."}]):
        count = claude.messages.count_tokens(model=MODEL, system=form, messages=ASK_WEATHER)
        assert count.input_tokens == _openai_count(
            http, [{"role": "system", "content": system}, *ASK_WEATHER])
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    turns = [*ASK_WEATHER, {"role": "assistant", "content": [call]}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "18 C, sunny"}]}]}]
    count = claude.messages.count_tokens(model=MODEL, messages=turns, tools=[WEATHER])
    assert count.input_tokens == _openai_count(http, [
        *ASK_WEATHER,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C, sunny"}], [WEATHER])
    reply = claude.messages.create(model=MODEL, max_tokens=48, messages=turns, tools=[WEATHER],
                                   extra_body=GREEDY)
    assert reply.content and reply.usage.input_tokens == count.input_tokens


@pytest.mark.parametrize(("body", "status", "kind", "words"), [
    ({"messages": ASK_WEATHER}, 400, "invalid_request_error", "max_tokens"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]},
     400, "invalid_request_error", "messages[0].content[0]"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "tool_choice": {"type": "any"}},
     400, "invalid_request_error", "tool_choice"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "tools": [WEATHER],
      "tool_choice": {"type": "tool", "name": "nope"}}, 400, "invalid_request_error", "nope"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "thinking": {"type": "enabled"}},
     400, "invalid_request_error", "budget_tokens"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "model": "claude-nope"},
     404, "not_found_error", "claude-nope"),
    ({"max_tokens": 10 ** 6, "messages": ASK_WEATHER}, 400, "invalid_request_error",
     "context length"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "tools": [
        {"type": "web_search_20250305", "name": "web_search"}]}, 400, "invalid_request_error",
     "tools[0].type"),
    ({"max_tokens": 8, "messages": ASK_WEATHER, "output_config": {"format": {
        "type": "json_schema", "schema": {"type": "object", "properties": 5}}}},
     400, "invalid_request_error", "schema"),  # rejected by the engine's grammar compiler
], ids=["no-max-tokens", "image", "any-without-tools", "unknown-tool", "no-budget",
        "unknown-model", "too-long", "server-tool", "bad-schema"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_errors_have_anthropic_shape(http, body, status, kind, words, stream) -> None:
    r = http.post("/v1/messages", json={"model": MODEL, **body, "stream": stream})
    assert r.status_code == status
    answer = r.json()
    assert answer["type"] == "error" and answer["error"]["type"] == kind
    assert words in answer["error"]["message"]


def test_client_errors_and_server_keeps_serving(claude, http) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="claude-nope", max_tokens=8, messages=ASK_WEATHER)
    assert info.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model=MODEL, messages=[])
    r = http.get("/v1/messages/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = http.post("/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    other = http.post("/v1/chat/completions", json={"messages": []})  # other routes: OpenAI's
    assert other.status_code == 400 and "param" in other.json()["error"]
    ok = claude.messages.create(model=MODEL, max_tokens=8, messages=ASK_WEATHER)
    assert ok.content and ok.stop_reason in ("end_turn", "max_tokens", "tool_use")
