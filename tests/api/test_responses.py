"""/v1/responses on a live `thinkgate serve` (the demo model): the openai client and an
openai-agents Agent whose Runner talks to the server through the Responses model."""

from __future__ import annotations

import asyncio
import json
import time

import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thinkgate.engine.demo.data import TOOLS

MODEL = "thinkgate-demo"
WEATHER = {"type": "function", **TOOLS["get_weather"]["function"]}
TIME = {"type": "function", **TOOLS["get_time"]["function"]}
ASK_WEATHER = "What's the weather in Paris?"
RESULT = json.dumps({"status": "ok", "value": 17})


def _create(client, **kwargs):
    return client.responses.create(model=MODEL, temperature=0, max_output_tokens=128, **kwargs)


def _calls(response) -> list:
    return [o for o in response.output if o.type == "function_call"]


def _check_call(call, tool) -> dict:
    args = json.loads(call.arguments)
    jsonschema.validate(args, tool["parameters"])
    assert call.name == tool["name"] and call.call_id and call.id.startswith("fc_")
    assert call.status == "completed"
    return args


def test_plain_response(client) -> None:
    r = _create(client, input="What is the capital of France?")
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.model == MODEL and r.output[-1].type == "message"
    message = r.output[-1]
    assert message.role == "assistant" and message.status == "completed"
    assert message.content[0].type == "output_text" and r.output_text.strip()
    u = r.usage
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert 0 < u.output_tokens_details.reasoning_tokens < u.output_tokens  # it thinks first
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text.strip()


def test_function_tool_call(client) -> None:
    r = _create(client, input=ASK_WEATHER, tools=[WEATHER])
    calls = _calls(r)
    assert r.status == "completed" and len(calls) == 1
    _check_call(calls[0], WEATHER)


@pytest.mark.slow  # a named call compiles its grammar: seconds on a loaded CPU
def test_tool_choice_named_and_none(client) -> None:
    named = _create(client, input=ASK_WEATHER, tools=[WEATHER, TIME],
                    tool_choice={"type": "function", "name": "get_time"})
    calls = _calls(named)
    assert len(calls) == 1
    _check_call(calls[0], TIME)
    none = _create(client, input=ASK_WEATHER, tools=[WEATHER], tool_choice="none")
    assert not _calls(none) and none.output[-1].type == "message"


def _events_fold(events: list) -> list[dict]:
    """Check the stream's framing and rebuild the output items from the events alone."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    items: dict[str, dict] = {}
    texts: dict[str, str] = {}
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert e.output_index == len(items) and e.item.status == "in_progress"
            items[e.item.id] = e.item.model_dump(exclude_none=True)
            texts[e.item.id] = ""
        elif e.type.endswith(".delta"):
            assert e.item_id == list(items)[-1] and e.output_index == len(items) - 1
            texts[e.item_id] += e.delta
        elif e.type in ("response.output_text.done", "response.reasoning_text.done"):
            assert e.text == texts[e.item_id]
        elif e.type == "response.function_call_arguments.done":
            assert e.arguments == texts[e.item_id]
        elif e.type == "response.output_item.done":
            assert e.item.id == list(items)[-1] and e.item.status == "completed"
            items[e.item.id] = e.item.model_dump(exclude_none=True)
    return list(items.values())


def test_stream_matches_non_stream(client) -> None:
    kwargs = dict(input=ASK_WEATHER, tools=[WEATHER])
    full = _create(client, **kwargs)
    # The client's stream helper rebuilds the response from the events (indexes must line up).
    with client.responses.stream(model=MODEL, temperature=0, max_output_tokens=128,
                                 **kwargs) as stream:
        events = list(stream)
        rebuilt = stream.get_final_response()
    final = events[-1]
    assert final.type == "response.completed" and final.response.status == "completed"
    items = _events_fold(events)
    assert items == [o.model_dump(exclude_none=True) for o in final.response.output]

    def shape(output: list) -> list:
        return [(o.type, o.status, getattr(o, "arguments", None), getattr(o, "name", None),
                 [c.text for c in getattr(o, "content", None) or []]) for o in output]

    assert shape(final.response.output) == shape(full.output) == shape(rebuilt.output)
    assert final.response.usage.output_tokens == full.usage.output_tokens
    kinds = [e.type for e in events]
    assert "response.reasoning_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds


def test_stream_text_and_incomplete(client) -> None:
    events = list(_create(client, input="Hello!", stream=True,
                          reasoning={"effort": "none"}))
    assert events[-1].type == "response.completed"
    items = _events_fold(events)
    assert [i["type"] for i in items] == ["message"]  # effort none: no thinking
    kinds = [e.type for e in events]
    assert kinds.index("response.content_part.added") < kinds.index("response.output_text.delta")
    cut = list(client.responses.create(model=MODEL, input="Hello!", max_output_tokens=4,
                                       stream=True))
    assert cut[-1].type == "response.incomplete"
    assert cut[-1].response.status == "incomplete"
    assert cut[-1].response.incomplete_details.reason == "max_output_tokens"
    assert cut[-1].response.usage.output_tokens == 4


def test_json_schema_format(client) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "is_capital": {"type": "boolean"}},
              "required": ["city", "is_capital"], "additionalProperties": False}
    r = _create(client, input="Tell me about Paris as JSON.", reasoning={"effort": "none"},
                text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                                 "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def test_previous_response_id_and_items_agree(client) -> None:
    first = _create(client, input=ASK_WEATHER, tools=[WEATHER])
    call = _calls(first)[0]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": RESULT}
    chained = _create(client, input=[result], tools=[WEATHER], previous_response_id=first.id)
    assert chained.previous_response_id == first.id
    assert chained.output[-1].type == "message" and chained.output_text.strip()
    # The same conversation sent as items renders the same prompt and gets the same answer.
    items = [{"role": "user", "content": ASK_WEATHER},
             *[o.model_dump(exclude_none=True) for o in first.output], result]
    replayed = _create(client, input=items, tools=[WEATHER])
    assert replayed.usage.input_tokens == chained.usage.input_tokens
    assert chained.usage.input_tokens > first.usage.input_tokens + len(call.arguments) // 4
    assert replayed.output_text == chained.output_text


def test_instructions_do_not_carry_over(client) -> None:
    first = _create(client, input="Hello!", instructions="Answer in one short sentence.")
    plain = _create(client, input="Hello!")
    assert first.usage.input_tokens > plain.usage.input_tokens
    again = _create(client, input="What is 2 plus 3?", previous_response_id=first.id)
    replay = _create(client, input=[{"role": "user", "content": "Hello!"},
                                    *[o.model_dump(exclude_none=True) for o in first.output],
                                    {"role": "user", "content": "What is 2 plus 3?"}])
    assert again.usage.input_tokens == replay.usage.input_tokens


def test_retrieve_delete_and_store_false(client) -> None:
    r = _create(client, input="Hello!")
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.status == "completed"
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    unstored = _create(client, input="Hello!", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError) as err:
        _create(client, input="Hi", previous_response_id=unstored.id)
    assert err.value.body["param"] == "previous_response_id"


def test_background_and_cancel(client) -> None:
    done = client.responses.create(model=MODEL, input="Hello!", background=True,
                                   max_output_tokens=32)
    assert done.status in ("queued", "in_progress") and done.background
    deadline = time.monotonic() + 60
    while client.responses.retrieve(done.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    finished = client.responses.retrieve(done.id)
    assert finished.status in ("completed", "incomplete") and finished.output
    with pytest.raises(openai.BadRequestError):  # only running background responses cancel
        client.responses.cancel(done.id)
    long = client.responses.create(model=MODEL, input="Hello!", background=True,
                                   max_output_tokens=1500, extra_body={"ignore_eos": True})
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(long.id).status == "cancelled"
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")
    bad_schema = {"type": "json_schema", "name": "x", "schema": {"type": "string",
                                                                "pattern": "(("}}
    failing = client.responses.create(model=MODEL, input="Hi", background=True,
                                      text={"format": bad_schema})
    while (failed := client.responses.retrieve(failing.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert failed.status == "failed" and failed.error.code == "invalid_prompt"
    assert "((" in failed.error.message


def test_background_stream_and_resume(client) -> None:
    events = list(client.responses.create(model=MODEL, input="Hello!", background=True,
                                          stream=True, max_output_tokens=48))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[0].response.background
    assert events[0].response.status == "queued" and events[1].response.status == "in_progress"
    assert events[-1].type in ("response.completed", "response.incomplete")
    rid = events[0].response.id
    again = list(client.responses.retrieve(rid, stream=True, starting_after=5))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events[6:]]
    assert client.responses.retrieve(rid).output == events[-1].response.output


def _covers(logprobs: list, text: str) -> bool:
    """The tokens spell the text, plus at most the markers an engine step may also carry."""
    tokens = "".join(lp.token for lp in logprobs)
    return text in tokens and len(tokens) - len(text) <= len("</think><|im_end|>")


def test_output_text_logprobs(client) -> None:
    kwargs = dict(input="Hello!", include=["message.output_text.logprobs"], top_logprobs=2)
    r = _create(client, **kwargs)
    part = r.output[-1].content[0]
    assert part.logprobs and _covers(part.logprobs, part.text)
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in part.logprobs)
    events = list(_create(client, stream=True, **kwargs))
    streamed = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    final = events[-1].response.output[-1].content[0]
    assert [(lp.token, lp.logprob) for lp in streamed] == [
        (lp.token, lp.logprob) for lp in final.logprobs]
    assert _covers(streamed, final.text)
    plain = _create(client, input="Hello!")
    assert not plain.output[-1].content[0].logprobs


@pytest.mark.parametrize("body, param", [
    ({"input": []}, "input"),
    ({"input": [{"type": "web_search_call"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
     "text.format.schema"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "max_output_tokens": 100000}, "input"),
    ({"input": "hi", "background": True, "store": False}, "background"),
    ({"input": "hi", "surprise": 1}, "surprise"),
])
def test_bad_input_is_400(http, body: dict, param: str) -> None:
    resp = http.post("/v1/responses", json={"model": MODEL, **body})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["type", "role", "content", "text",
                                                        "name", "call_id", "output"]), inner,
                                       max_size=3), max_leaves=6)
_ITEM = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["message", "reasoning", "function_call", "function_call_output",
                             "item_reference", "x"]),
    "role": st.sampled_from(["user", "assistant", "system", "tool", "x"]),
    "content": _JSON, "name": _JSON, "call_id": _JSON, "arguments": _JSON, "output": _JSON,
    "summary": _JSON})
_BODY = st.fixed_dictionaries({"input": st.text(max_size=8) | st.lists(_ITEM, max_size=3)},
                              optional={"tools": _JSON, "tool_choice": _JSON, "text": _JSON,
                                        "reasoning": _JSON, "instructions": _JSON,
                                        "include": _JSON, "top_logprobs": _JSON,
                                        "previous_response_id": _JSON, "store": _JSON})


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(body=_BODY)
def test_fuzzed_bodies_never_5xx(http, body: dict) -> None:
    resp = http.post("/v1/responses", json={"model": MODEL, **body, "max_output_tokens": 2})
    assert resp.status_code in (200, 400, 404), resp.text
    if resp.status_code != 200:
        assert resp.json()["error"]["message"]


def test_unknown_ids_are_404(http) -> None:
    for method, path in [("GET", "/v1/responses/resp_x"), ("DELETE", "/v1/responses/resp_x"),
                         ("POST", "/v1/responses/resp_x/cancel")]:
        resp = http.request(method, path)
        assert resp.status_code == 404 and resp.json()["error"]["param"] == "response_id"
    assert http.get("/health").status_code == 200


@pytest.mark.slow  # a second server
def test_store_size_flag_evicts_oldest(server_factory) -> None:
    small = server_factory("--responses-store-size", "1")
    client = openai.OpenAI(base_url=small.url, api_key="unused", max_retries=0, timeout=60)
    first, second = (client.responses.create(model=MODEL, input="Hello!", max_output_tokens=4)
                     for _ in range(2))
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    assert client.responses.retrieve(second.id).id == second.id


def test_agents_runner_calls_the_tool(server) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city"""
        cities.append(city)
        return RESULT

    async def run() -> tuple:
        client = AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        agent = Agent(name="weather", instructions="Answer questions about the weather.",
                      tools=[get_weather], model=model,
                      model_settings=ModelSettings(temperature=0, max_tokens=128))
        result = await Runner.run(agent, ASK_WEATHER)
        streamed = Runner.run_streamed(agent, ASK_WEATHER)
        async for _ in streamed.stream_events():
            pass
        await client.close()
        return result, streamed

    result, streamed = asyncio.run(run())
    assert len(cities) >= 2 and all(isinstance(c, str) and c for c in cities)
    for run_result in (result, streamed):
        kinds = [type(i).__name__ for i in run_result.new_items]
        assert "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds
        assert kinds[-1] == "MessageOutputItem"
        assert isinstance(run_result.final_output, str) and run_result.final_output.strip()
