"""One synthetic request and what a good assistant turn does with it, before rendering.

A `Task` holds the user's turn (and any earlier turns), the tools offered, what the answer is
(tool calls, a JSON object, or text) and the reasoning as sentences. `chats.py` renders a task
for either model: the demo model thinks in one short sentence (`short`), the reasoning model in
`steps` (more of them for requests with more parts, fewer at low reasoning effort).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    kind: str                       # "tool", "json", "result", "plain"
    user: str
    steps: list[str]                # the reasoning model's sentences, first = what is asked
    short: str                      # the demo model's one-line reasoning
    answer: str = ""                # text answer ("plain", "result") or JSON text ("json")
    calls: list[tuple[str, dict]] = field(default_factory=list)  # ("tool") name, arguments
    tools: list[dict] | None = None
    history: list[dict] = field(default_factory=list)  # turns between the user and the answer
    schema: dict | None = None      # ("json") the schema the answer satisfies
    expected: dict[str, Any] | None = None  # ("json") the values asked for; ("result") used
    check: str | None = None        # a high-effort double-check sentence
    compact: bool = False           # ("tool") calls as a forced call's grammar writes them
    tight: bool = False             # no blank line after </think> (below; the v3 mix)

    @property
    def separator(self) -> str:
        """What follows `</think>`: a blank line, or nothing where a grammar writes the answer
        (`tool_choice` required / named and `response_format` grammars start right after the
        end of thinking, so the model must go on from `</think><tool_call>` or `</think>{`)."""
        return "" if self.tight else "\n\n"

    def body(self) -> str:
        """The assistant's turn after any thinking."""
        if self.kind == "tool":
            return "\n".join(call_text(n, a, self.compact) for n, a in self.calls)
        return self.answer


def call_text(name: str, args: dict, compact: bool = False) -> str:
    """A hermes call as the demo chat template renders one, or (`compact`) as the grammar of a
    forced call (`tool_choice` required or named) writes it: no newlines inside the tags."""
    body = json.dumps({"name": name, "arguments": args})
    return f"<tool_call>{body}</tool_call>" if compact else f"<tool_call>\n{body}\n</tool_call>"


def fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": params}}


def says(args: dict[str, Any]) -> str:
    """"city Lisbon and unit celsius": argument values as a reasoning phrase."""
    parts = [f"{k} {v}" for k, v in args.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
