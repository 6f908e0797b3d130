"""JSON arguments retyped by the tool's schema (vLLM 0.33's engine parsers with JSON arguments:
granite, kimi_k2, mistral, inkling, plamo3), the same streamed one character at a time as
parsed; hermes, whose vLLM parser does not retype, keeps the values as written.

Expected values were read from vLLM 0.33's own parsers on these outputs (`parser_diff_vllm`)."""

from __future__ import annotations

import json

import pytest
from thinkgate.parsers import get_parser

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {
        "v": {"type": "integer"}, "s": {"type": "string"},
        "o": {"type": "object", "properties": {"n": {"type": "number"}}}}}}}]
ARGS = '{"v": "3", "s": 42, "o": {"n": "1.5"}, "free": "7"}'
RETYPED = {"v": 3, "s": "42", "o": {"n": 1.5}, "free": "7"}
_PLAMO = ("<|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>"
          "<|plamo:begin_tool_name:plamo|>f<|plamo:end_tool_name:plamo|>"
          "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{A}"
          "<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>"
          "<|plamo:end_tool_requests:plamo|>")
OUTPUTS = {
    "granite": '<|tool_call|>[{{"name": "f", "arguments": {A}}}]',
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0 "
                "<|tool_call_argument_begin|>{A}<|tool_call_end|><|tool_calls_section_end|>"),
    "mistral": "[TOOL_CALLS]f[ARGS]{A}",
    "inkling": '<|content_invoke_tool_json|>{{"name":"f","args":{A}}}<|end_message|>',
    "plamo3": _PLAMO,
    "hermes": '<tool_call>{{"name": "f", "arguments": {A}}}</tool_call>',
}


def _streamed_args(parser, text: str) -> str:
    s = parser.stream(tools=TOOLS)
    deltas = [d for ch in text for d in s.feed(ch)] + s.finish()
    return "".join(tc["function"].get("arguments") or ""
                   for d in deltas for tc in d.get("tool_calls", []))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_arguments_retyped_by_schema(name: str) -> None:
    text = OUTPUTS[name].replace("{{", "{").replace("}}", "}").replace("{A}", ARGS)
    parser = get_parser(tool_parser=name)
    want = json.loads(ARGS) if name == "hermes" else RETYPED
    msg = parser.parse(text, tools=TOOLS)
    assert [c.name for c in msg.tool_calls] == ["f"]
    assert json.loads(msg.tool_calls[0].arguments) == want
    assert json.loads(_streamed_args(parser, text)) == want


def test_no_schema_no_retyping() -> None:
    text = "[TOOL_CALLS]g[ARGS]" + ARGS
    msg = get_parser(tool_parser="mistral").parse(text, tools=TOOLS)
    assert json.loads(msg.tool_calls[0].arguments) == json.loads(ARGS)
