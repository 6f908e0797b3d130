"""The one streaming interpreter: reasoning, content and tool sections, for every format.

`Parser` holds a reasoning format and a tool format and compiles their markers once (the role
tables: `roles.py`); `Parser.stream()` makes a `StreamParser` (`stream.py`, the state machine;
its deltas are written by `deltas.py`), whose `feed` turns each delta into OpenAI delta dicts.
`Parser.parse(text)` is `stream()` fed `text` once plus `finish()`, so the two cannot disagree;
`collect` folds deltas into one message, the same fold for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from thinkgate.parsers.reasoning_format import ReasoningFormat
from thinkgate.parsers.roles import id_markers, marker_roles, marker_sets
from thinkgate.parsers.stream import StreamParser
from thinkgate.parsers.types import ParsedMessage, ToolCall, ToolFormat


class Parser:
    """A reasoning format and a tool format (either may be None), compiled for streaming."""

    def __init__(self, reasoning: ReasoningFormat | None = None, tool: ToolFormat | None = None,
                 tokenizer: Any = None) -> None:
        self.reasoning = reasoning
        self.tool = tool
        self.tokenizer = tokenizer
        self._anchored = frozenset((*(tool.anchored_markers if tool is not None else ()),
                                    *(reasoning.leading_drop if reasoning is not None else ())))
        self._keep_ws = tool is not None and tool.keeps_whitespace
        self._anchor_after = tool.anchor_after if tool is not None else ()
        self._verbatim = tool is not None and tool.keeps_text_verbatim
        self._join = tool.content_join if tool is not None else None
        self._keep_rws = reasoning is not None and reasoning.whitespace != "strip"
        self._trim_rtail = reasoning is not None and reasoning.whitespace == "trail"
        self._rstrip = reasoning is not None and reasoning.whitespace == "rstrip"
        self._partial_drop = reasoning.partial_marker_drop if reasoning is not None else 0
        self._roles = marker_roles(reasoning, tool, self._anchored)
        self._sets, self._late_sets = marker_sets(self._roles, reasoning, self._anchored)
        self._id_markers = id_markers(tokenizer, self._roles, tool)

    def stream(self, tools: Sequence[dict[str, Any]] | None = None,
               chat_template_kwargs: Mapping[str, Any] | None = None,
               prompt_token_ids: Sequence[int] | None = None) -> StreamParser:
        """A fresh stream. With `prompt_token_ids` (and a tokenizer), a prompt that already
        closed thinking starts the output as content."""
        return StreamParser(self, tools, dict(chat_template_kwargs or {}), prompt_token_ids)

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None,
              chat_template_kwargs: Mapping[str, Any] | None = None,
              token_ids: Sequence[int] = ()) -> ParsedMessage:
        s = self.stream(tools, chat_template_kwargs)
        return collect([*s.feed(text, token_ids), *s.finish()])


def collect(deltas: Sequence[Mapping[str, Any]]) -> ParsedMessage:
    """Fold OpenAI delta dicts into one message (the same fold for streamed and parsed output)."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for d in deltas:
        reasoning.append(d.get("reasoning") or "")
        content.append(d.get("content") or "")
        for tc in d.get("tool_calls") or ():
            entry = calls.setdefault(tc["index"], ["", "", ""])
            fn = tc.get("function") or {}
            entry[0] = tc.get("id") or entry[0]
            entry[1] = fn.get("name") or entry[1]
            entry[2] += fn.get("arguments") or ""
    return ParsedMessage(
        reasoning="".join(reasoning) or None,
        content="".join(content) or None,
        tool_calls=[ToolCall(i, n, a or "{}") for _, (i, n, a) in sorted(calls.items())],
    )
