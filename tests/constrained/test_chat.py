"""LLM.chat and the shared chat layer on the demo model (qwen3 reasoning + hermes tools)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from thinkgate import SamplingParams
from thinkgate.api.chat import chat_layer_for
from thinkgate.engine.demo.data import TOOLS

ALL_TOOLS = list(TOOLS.values())


BOUNDED_STRING = "^[A-Za-z0-9 @.:,'!?_-]{0,24}$"


def _bounded(tool: dict[str, Any]) -> dict[str, Any]:
    """The tool with its string arguments capped at 24 characters and `strict` (its objects
    closed: by JSON Schema an open object takes other keys, whose free text the tiny demo model
    would ramble on in), so every sampled call completes within max_tokens (the property under
    test is validity). A pattern, because xgrammar drops maxLength inside tool tags that exclude
    the end marker."""
    tool = copy.deepcopy(tool)
    tool["function"]["strict"] = True
    for prop in tool["function"]["parameters"]["properties"].values():
        if prop.get("type") == "string" and "enum" not in prop:
            prop["pattern"] = BOUNDED_STRING
    return tool


BOUNDED_TOOLS = [_bounded(t) for t in ALL_TOOLS]
QUESTIONS = ["What's the weather in Lisbon?", "What time is it in Hanoi?", "What is 3 plus 4?",
             "Convert 10 SEK to INR.", "Hello!", "Set an alarm for 11:05.",
             "Search the web for coral reefs.", "What is the capital of Greece?"]


def _conv(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _check_calls(message: dict[str, Any], names: set[str]) -> None:
    assert message["tool_calls"], message
    for call in message["tool_calls"]:
        assert call["type"] == "function" and call["id"]
        name = call["function"]["name"]
        assert name in names
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, _bounded(TOOLS[name])["function"]["parameters"])


def test_auto_tools_give_a_parsed_call_with_finish_reason_tool_calls(llm: Any) -> None:
    [out] = llm.chat(_conv("What's the weather in Paris?"),
                     SamplingParams(temperature=0.0, max_tokens=120), use_tqdm=False,
                     tools=ALL_TOOLS)
    assert out.finish_reason == "tool_calls"
    _check_calls(out.message, {"get_weather"})
    assert out.message["reasoning"]  # it thought first
    assert out.usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_required_tool_choice_gives_valid_calls_on_all_16_sampled_requests(llm: Any) -> None:
    convs = [_conv(QUESTIONS[i % len(QUESTIONS)]) for i in range(16)]
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=120) for i in range(16)]
    outs = llm.chat(convs, params, use_tqdm=False, tools=BOUNDED_TOOLS, tool_choice="required",
                    thinking_token_budget=32)
    for out in outs:
        _check_calls(out.message, set(TOOLS))
        assert out.finish_reason == "tool_calls"


def test_named_tool_choice_gives_exactly_that_call_on_all_16_sampled_requests(llm: Any) -> None:
    convs = [_conv(QUESTIONS[i % len(QUESTIONS)]) for i in range(16)]
    params = [SamplingParams(temperature=1.0, seed=100 + i, max_tokens=100) for i in range(16)]
    choice = {"type": "function", "function": {"name": "send_email"}}
    outs = llm.chat(convs, params, use_tqdm=False, tools=BOUNDED_TOOLS, tool_choice=choice,
                    chat_template_kwargs={"enable_thinking": False})
    for out in outs:
        _check_calls(out.message, {"send_email"})
        assert len(out.message["tool_calls"]) == 1
        assert out.message["reasoning"] is None


def test_tool_choice_none_never_yields_calls(llm: Any) -> None:
    [out] = llm.chat(_conv("What's the weather in Lisbon?"),
                     SamplingParams(temperature=0.0, max_tokens=80), use_tqdm=False,
                     tools=ALL_TOOLS, tool_choice="none")
    assert out.message["tool_calls"] == []
    assert out.finish_reason in ("stop", "length")
    assert "# Tools" in out.prompt  # as vLLM: the template sees the tools, no call is read


def test_exclude_tools_when_tool_choice_none_leaves_them_out_of_the_prompt(llm: Any) -> None:
    from thinkgate.api.chat import ChatLayer

    ask = _conv("What's the weather in Lisbon?")
    for exclude, shown in ((False, True), (True, False)):
        layer = ChatLayer(llm.get_tokenizer(), reasoning_parser="qwen3",
                          tool_call_parser="hermes", exclude_tools_when_tool_choice_none=exclude)
        none = layer.prepare(ask, tools=ALL_TOOLS, tool_choice="none")
        assert ("# Tools" in none.prompt) == shown
        assert "# Tools" in layer.prepare(ask, tools=ALL_TOOLS, tool_choice="auto").prompt


def test_tools_with_a_response_format_constrain_calls_and_answer(llm: Any) -> None:
    # closed like BOUNDED_TOOLS: an open object takes other keys, whose free text a sampled
    # (T = 1) tiny model may ramble on in past max_tokens
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}},
              "required": ["answer"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    convs = [_conv(q) for q in QUESTIONS]
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=120) for i in range(8)]
    outs = llm.chat(convs, params, use_tqdm=False, tools=BOUNDED_TOOLS, response_format=fmt,
                    thinking_token_budget=32)
    for out in outs:
        if out.message["tool_calls"]:
            _check_calls(out.message, set(TOOLS))
            assert out.finish_reason == "tool_calls"
        else:
            jsonschema.validate(json.loads(out.message["content"]), schema)


def test_streaming_deltas_fold_to_the_non_streamed_message(llm: Any) -> None:
    [out] = llm.chat(_conv("What's the weather in Lisbon?"),
                     SamplingParams(temperature=0.0, max_tokens=120), use_tqdm=False,
                     tools=ALL_TOOLS)
    layer = chat_layer_for(llm)
    request = layer.prepare(_conv("What's the weather in Lisbon?"), tools=ALL_TOOLS)
    tok = llm.get_tokenizer()
    ids = out.output.outputs[0].token_ids
    stream, deltas, text = layer.stream(request), [], ""
    for i in range(len(ids)):
        new = tok.decode(ids[: i + 1], skip_special_tokens=True)
        deltas += stream.feed(new[len(text):], ids[i:i + 1])
        text = new
    more, reason = stream.finish("stop")
    from thinkgate.api.chat import assistant_message

    streamed = assistant_message(deltas + more)
    assert reason == out.finish_reason == "tool_calls"
    assert {k: v for k, v in streamed.items() if k != "tool_calls"} == \
        {k: v for k, v in out.message.items() if k != "tool_calls"}
    assert [c["function"] for c in streamed["tool_calls"]] == \
        [c["function"] for c in out.message["tool_calls"]]
    first = next(d for d in deltas if "tool_calls" in d)["tool_calls"][0]
    assert first["id"] and first["type"] == "function" and first["function"]["name"]


def test_length_cut_gives_finish_reason_length(llm: Any) -> None:
    [out] = llm.chat(_conv("What's the weather in Lisbon?"),
                     SamplingParams(temperature=0.0, max_tokens=5), use_tqdm=False,
                     tools=ALL_TOOLS)
    assert out.finish_reason == "length" and out.message["tool_calls"] == []


@pytest.mark.parametrize("kwargs, needle", [
    ({"tools": ALL_TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "nope"),
    ({"tools": [], "tool_choice": "auto"}, "tools"),
    ({"tools": ALL_TOOLS, "tool_choice": "sometimes"}, "sometimes"),
    ({"response_format": {"type": "xml"}}, "xml"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objx"}}}},
     "objx"),
])
def test_bad_chat_requests_raise_value_error(llm: Any, kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        llm.chat(_conv("hi"), SamplingParams(max_tokens=4), use_tqdm=False, **kwargs)
    assert needle in str(info.value)


def test_history_with_tool_results_renders(llm: Any) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}
    messages = [*_conv("What's the weather in Lisbon?"),
                {"role": "assistant", "content": None, "tool_calls": [call],
                 "reasoning_content": "Need the weather."},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
    [out] = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=60), use_tqdm=False,
                     tools=ALL_TOOLS)
    assert '"arguments": {"city": "Lisbon"}' in out.prompt
    assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in out.prompt
    assert out.finish_reason in ("stop", "length", "tool_calls")
