"""The Responses translators without a server: deltas → events, items → messages, the store."""

from __future__ import annotations

import argparse

import pytest
from thinkgate.api.cli_args import add_server_args
from thinkgate.api.responses.events import ResponseEvents
from thinkgate.api.responses.items import (
    ItemError,
    chat_tool_choice,
    chat_tools,
    input_messages,
    response_format,
)
from thinkgate.api.responses.store import ResponseStore, StoredResponse
from thinkgate.api.server.state import ServerConfig

CALL = {"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": ""}}


def _args(text: str, index: int = 0) -> dict:
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}


def _run(deltas: list[dict], status: str = "completed") -> tuple[list[dict], dict]:
    ev = ResponseEvents({"id": "resp_1", "object": "response", "status": "in_progress"})
    events = ev.start()
    for d in deltas:  # one delta per feed, as a stream would deliver them
        events += ev.feed([d])
    events += ev.finish(status, {"output_tokens": 1},
                        "max_output_tokens" if status == "incomplete" else None)
    return events, ev.response


def test_reasoning_text_then_call_event_order() -> None:
    events, response = _run([{"reasoning": "Think"}, {"reasoning": "ing."}, {"content": "\n\n"},
                             {"tool_calls": [CALL]}, _args('{"city": '), _args('"Oslo"}')])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    reasoning, call = response["output"]  # the whitespace before the call made no message
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Thinking."}]
    assert call["arguments"] == '{"city": "Oslo"}' and call["call_id"] == "call_1"
    assert call["name"] == "get_weather" and call["status"] == "completed"
    assert [e.get("output_index") for e in events[9:14]] == [1] * 5
    assert events[-1]["response"]["output"] == response["output"]
    assert events[0]["response"]["output"] == []  # a snapshot, not the live object


def test_two_calls_are_two_items() -> None:
    second = {**CALL, "index": 1, "id": "call_2"}
    _, response = _run([{"tool_calls": [CALL]}, _args("{}"), {"tool_calls": [second]},
                        _args("{}", 1)])
    assert [o["call_id"] for o in response["output"]] == ["call_1", "call_2"]
    assert len({o["id"] for o in response["output"]}) == 2


def test_text_keeps_leading_whitespace_and_incomplete_marks_the_item() -> None:
    events, response = _run([{"content": "\n"}, {"content": "Hi"}, {"content": " there"}],
                            status="incomplete")
    (message,) = response["output"]
    assert message["content"][0]["text"] == "\nHi there"
    assert message["status"] == "incomplete"
    assert events[-1]["type"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "\nHi there"


def test_whitespace_only_answer_is_still_an_answer() -> None:
    _, response = _run([{"content": " "}])
    assert response["output"][0]["content"][0]["text"] == " "
    _, empty = _run([])
    assert empty["output"] == [] and empty["status"] == "completed"


def test_logprobs_follow_the_output_text() -> None:
    ev = ResponseEvents({"id": "resp_1"})
    tokens = ("r", "\n", " ", "\n", "Hi", "!")
    lp = [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in tokens]
    ev.feed([{"reasoning": "r"}], lp[:1])  # thinking tokens: not the output text's
    ev.feed([], lp[1:2])  # text the parser held back: its logprobs wait for it
    ev.feed([{"content": "\n "}], lp[2:3])  # whitespace we hold, with its logprobs
    events = ev.feed([{"content": "\nHi"}], lp[3:5]) + ev.feed([{"content": "!"}], lp[5:])
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[x["token"] for x in e["logprobs"]] for e in deltas] == [list(tokens[1:5]), ["!"]]
    ev.finish("completed", {})
    assert [x["token"] for x in ev.response["output"][1]["content"][0]["logprobs"]] == list(
        tokens[1:])


def test_whitespace_held_after_thinking_keeps_its_logprobs() -> None:
    """One engine output ends the thinking and writes the answer's first newlines, which the
    parser holds (vLLM keeps them): their logprobs go with the answer's first text."""
    ev = ResponseEvents({"id": "resp_1"})
    tokens = (".", "</think>", "\n", "\n", "Hello", "!")
    lp = [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in tokens]
    ev.feed([{"reasoning": "."}], lp[:4])  # the "\n" tokens: held as the answer's start
    events = ev.feed([{"content": "\n\nHello"}], lp[4:5]) + ev.feed([{"content": "!"}], lp[5:])
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[x["token"] for x in e["logprobs"]] for e in deltas] == [["\n", "\n", "Hello"],
                                                                      ["!"]]


def test_items_fold_into_assistant_turns() -> None:
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "two"}]},
        {"type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Done", "annotations": []}]},
    ]
    messages = input_messages(items)
    assert [m["role"] for m in messages] == ["developer", "user", "assistant", "tool", "tool",
                                             "assistant"]
    turn = messages[2]
    assert turn["reasoning"] == "think" and turn["content"] is None
    assert [c["id"] for c in turn["tool_calls"]] == ["c1", "c2"]
    assert turn["tool_calls"][1]["function"] == {"name": "g", "arguments": "{}"}
    assert messages[4] == {"role": "tool", "tool_call_id": "c2", "content": "two"}
    assert messages[5] == {"role": "assistant", "content": "Done"}
    answer = input_messages([{"type": "reasoning", "summary": [
        {"type": "summary_text", "text": "s"}]}, {"role": "assistant", "content": "A"}])
    assert answer == [{"role": "assistant", "content": "A", "reasoning": "s"}]
    assert input_messages("Hello") == [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize("items, param", [
    (["text"], "input[0]"),
    ([{"role": "tool", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": 3}], "input[0].content"),
    ([{"role": "user", "content": [{"type": "input_file"}]}], "input[0].content[0]"),
    ([{"type": "function_call", "arguments": "{}"}], "input[0].name"),
    ([{"type": "function_call", "name": "f", "arguments": {}}], "input[0].arguments"),
    ([{"type": "reasoning", "encrypted_content": "xyz"}], "input[0].encrypted_content"),
    ([{"type": "item_reference", "id": "msg_1"}], "input[0].type"),
])
def test_bad_items_name_their_place(items: list, param: str) -> None:
    with pytest.raises(ItemError) as err:
        input_messages(items)
    assert err.value.param == param and str(err.value).startswith(param)


def test_tools_choice_and_format() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    assert chat_tools([tool]) == [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}, "strict": True}}]
    assert chat_tools([]) is None
    with pytest.raises(ItemError):
        chat_tools([{"type": "file_search"}])
    assert chat_tool_choice("required") == "required"
    assert chat_tool_choice({"type": "function", "name": "f"}) == {
        "type": "function", "function": {"name": "f"}}
    with pytest.raises(ItemError):
        chat_tool_choice({"type": "allowed_tools", "tools": []})
    schema = {"type": "object"}
    assert response_format({"type": "json_schema", "name": "n", "schema": schema}) == {
        "type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": None}}
    assert response_format({"type": "json_object"}) == {"type": "json_object"}
    assert response_format(None) is None
    with pytest.raises(ItemError):
        response_format({"type": "yaml"})


def test_store_evicts_oldest_first() -> None:
    store = ResponseStore(2)
    for i in range(3):
        store.put(StoredResponse({"id": f"r{i}"}, []))
    assert store.get("r0") is None and store.get("r1") and store.get("r2") and len(store) == 2
    store.put(StoredResponse({"id": "r1", "v": 2}, []))  # re-put: newest again
    store.put(StoredResponse({"id": "r3"}, []))
    assert store.get("r2") is None and store.get("r1").response["v"] == 2
    assert store.delete("r1") is not None and store.get("r1") is None
    none = ResponseStore(0)
    none.put(StoredResponse({"id": "x"}, []))
    assert len(none) == 0
    with pytest.raises(ValueError, match="-1"):
        ResponseStore(-1)
    with pytest.raises(ValueError, match="responses_store_size"):
        ServerConfig(served_model_names=("m",), responses_store_size=-1)


def test_store_size_flag() -> None:
    parser = argparse.ArgumentParser()
    add_server_args(parser)
    assert parser.parse_args([]).responses_store_size == 1024
    assert parser.parse_args(["--responses-store-size", "3"]).responses_store_size == 3
