"""Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, repeatable.

The reference tool format for the framework's plug-in interface (see parsers/README.md). An
unclosed last call is read at end of output if its JSON is complete; a body that is not a call
object stays content, markers included.
"""

from __future__ import annotations

import json

from thinkgate.parsers.registry import register_tool_parser
from thinkgate.parsers.types import (
    Content,
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolFormat,
    ToolSection,
    ToolStart,
)


class JsonCallSection(ToolSection):
    """One `{"name", "arguments"|"parameters"}` object up to `end`; parsed when it closes."""

    def __init__(self, start: str, end: str) -> None:
        self.start, self.end = start, end
        self._parts: list[str] = []
        self._tail = ""  # last len(end)-1 chars, where a split end marker may begin

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        window = self._tail + text
        i = window.find(self.end)
        if i < 0:
            keep = len(self.end) - 1
            self._parts.append(window[:max(0, len(window) - keep)])
            self._tail = window[max(0, len(window) - keep):]
            return [], None
        self._parts.append(window[:i])
        body = "".join(self._parts)
        return self._call(body, closed=True), window[i + len(self.end):]

    def finish(self) -> list[Event]:
        return self._call("".join(self._parts) + self._tail, closed=False)

    def _call(self, body: str, closed: bool) -> list[Event]:
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        name = obj.get("name") if isinstance(obj, dict) else None
        args = obj.get("arguments", obj.get("parameters", {})) if isinstance(obj, dict) else None
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return [Content(self.start + body + (self.end if closed else ""))]
        return [ToolStart(name), ToolArgs(json.dumps(args, ensure_ascii=False)), ToolEnd()]


class Hermes(ToolFormat):
    start_markers = ("<tool_call>",)
    special_markers = ("</tool_call>",)

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return JsonCallSection(marker, "</tool_call>")


register_tool_parser("hermes")(Hermes)
register_tool_parser("qwen3_json")(Hermes)
