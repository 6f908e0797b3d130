"""A hermes tool call cut by max_tokens (`tool_choice: "required"`, complete_before_max_tokens
off), against vLLM 0.33's hermes parser on the same text.

`VLLM` holds vLLM's results, recorded with `benchmarks/hermes_cut_vllm.py` (vLLM 0.33 in
/work/venvs/vllm033) on the demo model's cut outputs. vLLM's non-streamed parse drops every
call as soon as one is not JSON and returns the whole text as content; its stream has already
sent each started call (name, then the argument text as written). Ours is one result, the
stream's (parsers/README.md, "Deliberate differences"): the calls vLLM streamed, each cut
call's arguments closed to valid JSON (vLLM's streamed argument text, then what closes it);
a cut before a call's name ended is no call, and the text is content, as vLLM returns it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from thinkgate import SamplingParams
from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS
from thinkgate.parsers import get_parser

TOOLS = [DEMO_TOOLS["get_weather"], DEMO_TOOLS["get_time"]]
_CALL = '<tool_call>{"name": "get_time", "arguments": {"city": "Tokyo"}}'
_TOKYO = ["get_time", '{"city": "Tokyo"}']
# text -> (vLLM non-streamed (content, calls), vLLM streamed calls [name, argument text])
VLLM: dict[str, tuple[tuple[str | None, list[list[str]]], list[list[str]]]] = {
    '<tool_call>{"name": "get': (('<tool_call>{"name": "get', []), []),
    '<tool_call>{"name": "get_time", "': (('<tool_call>{"name": "get_time", "', []),
                                          [["get_time", ""]]),
    '<tool_call>{"name": "get_time", "arguments": {"city': (
        ('<tool_call>{"name": "get_time", "arguments": {"city', []),
        [["get_time", '{"city']]),
    '<tool_call>{"name": "get_time", "arguments": {"city": "Tok': (
        ('<tool_call>{"name": "get_time", "arguments": {"city": "Tok', []),
        [["get_time", '{"city": "Tok']]),
    _CALL: ((None, [_TOKYO]), [_TOKYO]),
    _CALL + '</tool_call><tool_call>{"name": "get_weather", "arguments": {"ci': (
        (_CALL + '</tool_call><tool_call>{"name": "get_weather", "arguments": {"ci', []),
        [_TOKYO, ["get_weather", '{"ci']]),
    _CALL + "</tool_call>\n<tool_call>": ((_CALL + "</tool_call>\n<tool_call>", []), [_TOKYO]),
}
# vLLM's stream sends no content for these texts (its non-streamed content is the whole text)
_MARKER_AS_CONTENT = _CALL + "</tool_call>\n<tool_call>"


def check_against_vllm(text: str, content: str | None, calls: list[list[str]]) -> None:
    """Ours (content, [name, arguments]) for a cut `text`, against vLLM's recorded results."""
    (parsed_content, parsed_calls), streamed = VLLM[text]
    if parsed_calls or not streamed:  # vLLM's two modes agree: so do we
        assert (content, calls) == (parsed_content, parsed_calls)
        return
    assert content is None
    assert [name for name, _ in calls] == [name for name, _ in streamed]
    for (_, ours), (_, theirs) in zip(calls, streamed):
        assert ours.startswith(theirs) or theirs == "", (ours, theirs)
        assert isinstance(json.loads(ours), dict)  # closed, so it parses


@pytest.mark.parametrize("text", [t for t in VLLM if t != _MARKER_AS_CONTENT])
def test_cut_hermes_call_against_vllm(text: str) -> None:
    m = get_parser(tool_parser="hermes").parse(text, tools=TOOLS)
    check_against_vllm(text, m.content, [[c.name, c.arguments] for c in m.tool_calls])


def test_start_marker_after_a_complete_call_is_a_listed_difference() -> None:
    """vLLM's non-streamed parse returns this whole text as content (the call lost) and its
    stream sends the call but never the lone marker; ours keeps the call and gives the marker
    back as content (parsers/README.md, "Deliberate differences": nothing is lost)."""
    (parsed_content, parsed_calls), streamed = VLLM[_MARKER_AS_CONTENT]
    assert parsed_calls == [] and streamed == [_TOKYO]  # the facts the row rests on
    m = get_parser(tool_parser="hermes").parse(_MARKER_AS_CONTENT, tools=TOOLS)
    assert [[c.name, c.arguments] for c in m.tool_calls] == streamed
    assert m.content == "<tool_call>"
    assert parsed_content.endswith(m.content)


@pytest.mark.parametrize("max_tokens", [6, 10, 14])
def test_cut_call_from_the_engine_against_vllm(llm: Any, max_tokens: int) -> None:
    """The demo model's cut call (the texts `VLLM` was recorded on): the chat message is what
    the facts say, with finish_reason "length" and no completion (the option is off)."""
    params = SamplingParams(temperature=1.0, seed=0, max_tokens=max_tokens)
    out = llm.chat([[{"role": "user", "content": "Weather in Paris and the time?"}]], params,
                   tools=TOOLS, tool_choice="required",
                   chat_template_kwargs={"enable_thinking": False}, use_tqdm=False)[0]
    sample = out.output.outputs[0]
    assert sample.finish_reason == "length" and sample.stop_reason is None
    assert sample.text in VLLM, f"re-record VLLM with benchmarks/hermes_cut_vllm.py: {sample.text!r}"
    calls = [[c["function"]["name"], c["function"]["arguments"]]
             for c in out.message["tool_calls"]]
    check_against_vllm(sample.text, out.message["content"], calls)
