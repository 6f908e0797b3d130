"""The chat layer's output deltas as Anthropic Messages stream events, and those events folded.

    writer = BlockWriter()
    events = writer.feed(deltas)     # content_block_start / _delta / _stop dicts, as they come
    events += writer.close()
    message = fold([message_start, *events, message_delta])   # the non-streaming body

Blocks open one at a time, in the order the model writes them: `thinking` (thinking_delta,
then a signature_delta before it closes), `text` (text_delta), `tool_use` (input_json_delta:
the OpenAI argument deltas verbatim). The non-streaming message is these same events folded,
so the two answers cannot disagree.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Event = dict[str, Any]


class BlockWriter:
    """OpenAI `delta` dicts (reasoning / content / tool_calls) → content-block events.

    omit_thinking: Anthropic's `display: "omitted"`: thinking blocks keep their signature but
    not their text."""

    def __init__(self, omit_thinking: bool = False) -> None:
        self.omit_thinking = omit_thinking
        self.index = -1
        self.kind: str | None = None  # the type of the open block
        self.call_index: int | None = None  # the open tool_use block's OpenAI call index

    def feed(self, deltas: Iterable[Mapping[str, Any]]) -> list[Event]:
        events: list[Event] = []
        for delta in deltas:
            if delta.get("reasoning"):
                self._open(events, "thinking", {"thinking": "", "signature": ""})
                if not self.omit_thinking:
                    events.append(self._delta({"type": "thinking_delta",
                                               "thinking": delta["reasoning"]}))
            if delta.get("content"):
                self._open(events, "text", {"text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or ():
                self._call(events, call)
        return events

    def close(self) -> list[Event]:
        events: list[Event] = []
        self._close(events)
        return events

    def _call(self, events: list[Event], call: Mapping[str, Any]) -> None:
        fn = call.get("function") or {}
        if call.get("index") != self.call_index or self.kind != "tool_use":
            self._close(events)
            self.index += 1
            self.kind, self.call_index = "tool_use", call.get("index")
            block = {"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                     "name": fn.get("name") or "", "input": {}}
            events.append({"type": "content_block_start", "index": self.index,
                           "content_block": block})
        if fn.get("arguments"):
            events.append(self._delta({"type": "input_json_delta",
                                       "partial_json": fn["arguments"]}))

    def _open(self, events: list[Event], kind: str, empty: dict[str, Any]) -> None:
        if self.kind == kind:
            return
        self._close(events)
        self.index += 1
        self.kind, self.call_index = kind, None
        events.append({"type": "content_block_start", "index": self.index,
                       "content_block": {"type": kind, **empty}})

    def _close(self, events: list[Event]) -> None:
        if self.kind is None:
            return
        if self.kind == "thinking":  # opaque to clients; this server checks nothing on return
            events.append(self._delta({"type": "signature_delta",
                                       "signature": uuid.uuid4().hex}))
        events.append({"type": "content_block_stop", "index": self.index})
        self.kind, self.call_index = None, None

    def _delta(self, delta: dict[str, Any]) -> Event:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}


def stop_fields(finish_reason: str | None, stop_reason: int | str | None,
                stop_sequences: Sequence[str] | None) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for the chat layer's finish_reason and the engine's reason."""
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if isinstance(stop_reason, str) and stop_reason in (stop_sequences or ()):
        return "stop_sequence", stop_reason
    return "end_turn", None


def fold(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The message a stream of events describes (message_start first), as a client folds it."""
    message: dict[str, Any] | None = None
    partial: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = copy.deepcopy(dict(event["message"]))
            continue
        if message is None:
            raise ValueError(f"event {kind!r} before message_start")
        blocks = message["content"]
        if kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta["partial_json"])
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                field = "text" if delta["type"] == "text_delta" else "thinking"
                block[field] += delta[field]
        elif kind == "content_block_stop" and event["index"] in partial:
            blocks[event["index"]]["input"] = _tool_input("".join(partial[event["index"]]))
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    if message is None:
        raise ValueError("no message_start event")
    return message


def _tool_input(arguments: str) -> dict[str, Any]:
    # The tool parsers close a cut-off call's arguments to valid JSON; an object is the only
    # shape Anthropic's `input` takes, so anything else keeps the raw text under "arguments".
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}
