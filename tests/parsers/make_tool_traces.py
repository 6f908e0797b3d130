"""Writes traces/tools/<name>.json: the common cases for every tool format.

Run ``python tests/parsers/make_tool_traces.py`` after changing a format's data. Texts are written
by the renderer (``tools.grammar.render_calls``), which is independent of the parser; expected
results are stated directly. Format quirks have hand-written traces in traces/tools/_quirks*.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thinkgate.parsers import get_reasoning_format
from thinkgate.parsers.tools.formats import TOOL_SPECS
from thinkgate.parsers.tools.grammar import render_calls

OUT = Path(__file__).parent / "traces" / "tools"
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "detail": {"type": "object"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}},
]


def _streams_strings(name: str) -> bool:
    """A string cut off mid-value is kept (Gemma 4: closed at the output's end, as vLLM)."""
    r = TOOL_SPECS[name].regions[0]
    return r.render_args == "json" or (r.render_args == "xml" and r.params is not None
                                       and not r.params.cdata) or r.string_delim == '<|"|>'


def _typed_without_schema(name: str) -> bool:
    r = TOOL_SPECS[name].regions[0]
    if r.render_args == "nested_xml":
        return False
    if r.render_args != "xml":
        return True
    assert r.params is not None
    return ("DSML" in r.params.open or r.params.open.endswith("key=")
            or r.params.decode != "schema" or name == "minicpm5")  # minicpm5: vLLM's typing


def _held_whole(name: str) -> bool:
    """Formats whose calls are read whole at their end (a cut-off call stays text)."""
    return name in ("minicpm5", "poolside_v1") or TOOL_SPECS[name].regions[0].hold_args


def cases(name: str) -> list[dict[str, Any]]:
    spec = TOOL_SPECS[name]
    marker = spec.regions[0].begin[0]
    weather = {"city": "Paris", "days": 3}
    nested = spec.regions[0].render_args == "nested_xml"  # untyped leaves stay strings
    inner = marker if len(marker) > 1 and not nested else "<b>"
    tricky = {"city": f'Say "hi" {inner} é 中 \\ end',
              "detail": {"hourly": "yes" if nested else True,
                         "list": ["x", "y"] if nested else [1, 2.5, None], "deep": {"a": "b"}}}
    call = render_calls(name, [("get_weather", weather)])
    cut = call[: call.index("Paris") + 3]
    out = [
        {"name": "single", "text": call, "tools": TOOLS,
         "tool_calls": [{"name": "get_weather", "arguments": weather}]},
        {"name": "content_before", "text": "Let me check. " + call, "tools": TOOLS,
         "content": "Let me check. " if spec.keep_ws else "Let me check.",
         "tool_calls": [{"name": "get_weather", "arguments": weather}]}
        if marker not in spec.anchored else  # a bare "[" / "{" counts only at the start
        {"name": "content_before", "text": "Let me check. " + call, "tools": TOOLS,
         "content": "Let me check. " + call, "allow_markers": [marker]},
        {"name": "parallel", "tools": TOOLS,
         "text": render_calls(name, [("get_weather", weather), ("ping", {}),
                                     ("get_weather", {"city": "Oslo"})]),
         "tool_calls": [{"name": "get_weather", "arguments": weather},
                        {"name": "ping", "arguments": {}},
                        {"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"name": "empty_arguments", "tools": TOOLS, "text": render_calls(name, [("ping", {})]),
         "tool_calls": [{"name": "ping", "arguments": {}}]},
        {"name": "no_call", "tools": TOOLS, "text": "The weather in Paris is mild today.",
         "content": "The weather in Paris is mild today."},
        {"name": "tricky_strings_nested", "tools": TOOLS,
         "text": render_calls(name, [("get_weather", tricky)]),
         "tool_calls": [{"name": "get_weather", "arguments": tricky}]},
        {"name": "truncated_in_value", "tools": TOOLS, "text": cut, "content": cut,
         "allow_markers": [m for m in (*spec.start_markers(), *spec.special_markers())
                           if m in cut]}
        if _held_whole(name) else
        {"name": "truncated_in_value", "tools": TOOLS, "text": cut,
         "tool_calls": [{"name": "get_weather",
                         "arguments": {"city": "Par"} if _streams_strings(name) else {}}]},
        {"name": "no_tools_given", "text": call,
         "tool_calls": [{"name": "get_weather", "arguments": {
             "city": "Paris", "days": 3 if _typed_without_schema(name) else "3"}}]},
    ]
    if spec.regions[0].end or spec.regions[0].call_close:
        out.append({"name": "content_after", "tools": TOOLS, "text": call + "\nDone.",
                    "content": "\nDone." if spec.verbatim else "Done.",
                    "tool_calls": [{"name": "get_weather", "arguments": weather}]})
    if len(marker) > 1:
        bare = spec.regions[0].bare_give_back  # the marker is a control token: not text
        dropped = spec.regions[0].drop_cut_off  # a cut-off block is dropped (GLM's engine)
        out.append({"name": "truncated_at_marker", "tools": TOOLS,
                    "text": "Checking. " + marker,
                    "content": "Checking." if bare else "Checking. " + ("" if dropped else marker),
                    "allow_markers": [m for m in spec.special_markers() if m in marker]})
    return out


def _thinks_first(name: str) -> str:
    """The end marker of the thinking a tool format's own reasoning format starts in (Cohere
    Command 4's, which vLLM's tool parser splits itself), or ""."""
    reasoning = TOOL_SPECS[name].reasoning
    fmt = get_reasoning_format(reasoning) if reasoning else None
    return fmt.end[0] if fmt is not None and fmt.starts_in_reasoning({}) else ""


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sorted(TOOL_SPECS):
        group = {"tool_parser": name, "reasoning_parser": None, "cases": cases(name)}
        end = _thinks_first(name)
        for case in group["cases"] if end else ():  # the answer comes after the thinking
            case["text"] = end + case["text"]
        path = OUT / f"{name}.json"
        path.write_text(json.dumps([group], ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
