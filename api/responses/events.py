"""Chat deltas → the Responses API's typed stream events and output items.

`ResponseEvents` is fed the chat layer's OpenAI deltas (`{"reasoning"}`, `{"content"}`,
`{"tool_calls"}`) as the model writes and answers the events they cause, numbered by
`sequence_number` from 0:

    response.created, response.in_progress
    per output item, in order (output_index 0, 1, ...):
      reasoning:      output_item.added, content_part.added (reasoning_text),
                      reasoning_text.delta*, reasoning_text.done, content_part.done,
                      output_item.done
      message:        output_item.added, content_part.added (output_text),
                      output_text.delta*, output_text.done, content_part.done, output_item.done
      function_call:  output_item.added, function_call_arguments.delta*,
                      function_call_arguments.done, output_item.done
    response.completed (or response.incomplete, status "incomplete")

The non-streaming answer is `response` after `finish`: the same items the events described, so
the two cannot disagree. Whitespace-only text before a tool call opens no message item (models
write a newline or two between the reasoning and the call).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseEvents:
    """One response's output, built from chat deltas; see the module docstring."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response  # the Response object; `output` fills as items finish
        self.response["output"] = []
        self._seq = 0
        self._open: dict[str, Any] | None = None  # the item being written
        self._text: list[str] = []  # its text so far (reasoning, output text or arguments)
        self._held = ""  # whitespace-only output text not yet given an item
        self._held_logprobs: list[dict[str, Any]] = []  # and its tokens' logprobs
        self._call_index: int | None = None
        self._logprobs: list[dict[str, Any]] = []  # the open message's token logprobs
        self._pending: list[dict[str, Any]] | None = None  # this feed's, for its first text
        self._carried: list[dict[str, Any]] = []  # of steps whose text the parser held back

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _place(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.response["output"])}

    def error(self, code: str | None, message: str, param: str | None) -> dict[str, Any]:
        """The `error` event that ends a stream which failed after it started."""
        return self._event("error", code=code, message=message, param=param)

    # ---- the stream ----
    def start(self) -> list[dict[str, Any]]:
        """`response.created` (status queued for a background response) and `.in_progress`."""
        created = self._event("response.created", response=copy.deepcopy(self.response))
        self.response["status"] = "in_progress"
        return [created, self._event("response.in_progress",
                                     response=copy.deepcopy(self.response))]

    def feed(self, deltas: Sequence[Mapping[str, Any]],
             logprobs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Events for one engine output's deltas; its token `logprobs` (when asked for) go
        with the first output text it wrote (tokens spent thinking or calling have none; those
        of an output that wrote nothing wait for the next)."""
        self._pending = self._carried + logprobs if logprobs else self._carried
        self._carried = []
        events: list[dict[str, Any]] = []
        for delta in deltas:
            if delta.get("reasoning"):
                events += self._write("reasoning", delta["reasoning"])
            if delta.get("content"):
                events += self._content(delta["content"])
            for call in delta.get("tool_calls") or ():
                events += self._call(call)
        if not deltas:
            self._carried = self._pending or []
        elif self._pending and not any(d.get("content") or d.get("tool_calls") for d in deltas):
            # it wrote thinking only: its last whitespace tokens may be the answer's first text,
            # which the parser still holds (`</think>` then `\n\n`, in one engine output)
            self._carried = _whitespace_tail(self._pending)
        self._pending = None
        return events

    def finish(self, status: str, usage: dict[str, Any], incomplete_reason: str | None = None
               ) -> list[dict[str, Any]]:
        """Close the open item; the terminal event with the whole response."""
        item_status = "incomplete" if status == "incomplete" else "completed"
        events = self._close(item_status)
        calls = any(item["type"] == "function_call" for item in self.response["output"])
        if self._held and not calls:  # only whitespace was written: it is still the answer
            self._pending = self._held_logprobs
            events += self._open_item("message") + self._delta(self._held)
            self._held, self._held_logprobs = "", []
            events += self._close(item_status)
        self.response.update(status=status, usage=usage)
        if incomplete_reason is not None:
            self.response["incomplete_details"] = {"reason": incomplete_reason}
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return events + [self._event(kind, response=copy.deepcopy(self.response))]

    # ---- items ----
    def _content(self, text: str) -> list[dict[str, Any]]:
        if self._open is None or self._open["type"] != "message":
            if not (self._held + text).strip():
                self._held += text
                self._held_logprobs += self._pending or []
                self._pending = None
                return []
            text, self._held = self._held + text, ""
            self._pending = self._held_logprobs + (self._pending or [])
            self._held_logprobs = []
        return self._write("message", text)

    def _write(self, kind: str, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close("completed") + self._open_item(kind)
        return events + self._delta(text)

    def _call(self, call: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        fn = call.get("function") or {}
        same = (self._open is not None and self._open["type"] == "function_call"
                and call.get("index") == self._call_index)
        if not same:
            self._held, self._held_logprobs = "", []  # whitespace before a call: no answer
            events += self._close("completed") + self._open_item(
                "function_call", call_id=call.get("id") or item_id("call"),
                name=fn.get("name") or "")
            self._call_index = call.get("index")
        if fn.get("arguments"):
            events += self._delta(fn["arguments"])
        return events

    def _open_item(self, kind: str, **fields: Any) -> list[dict[str, Any]]:
        if kind == "reasoning":
            item = {"id": item_id("rs"), "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        elif kind == "message":
            item = {"id": item_id("msg"), "type": "message", "role": "assistant", "content": [],
                    "status": "in_progress"}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"id": item_id("fc"), "type": "function_call", "arguments": "",
                    "status": "in_progress", **fields}
            part = None
        self._open, self._text = item, []
        index = len(self.response["output"])
        events = [self._event("response.output_item.added", output_index=index,
                              item=copy.deepcopy(item))]
        if part is not None:
            events.append(self._event("response.content_part.added", **self._place(),
                                      content_index=0, part=part))
        return events

    def _delta(self, text: str) -> list[dict[str, Any]]:
        assert self._open is not None
        self._text.append(text)
        kind = self._open["type"]
        if kind == "reasoning":
            return [self._event("response.reasoning_text.delta", **self._place(),
                                content_index=0, delta=text)]
        if kind == "message":
            logprobs, self._pending = self._pending or [], None
            self._logprobs += logprobs
            return [self._event("response.output_text.delta", **self._place(), content_index=0,
                                delta=text, logprobs=logprobs)]
        return [self._event("response.function_call_arguments.delta", **self._place(),
                            delta=text)]

    def _close(self, status: str) -> list[dict[str, Any]]:
        item = self._open
        if item is None:
            return []
        text = "".join(self._text)
        place = self._place()
        if item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            item["content"] = [part]
            events = [self._event("response.reasoning_text.done", **place, content_index=0,
                                  text=text),
                      self._event("response.content_part.done", **place, content_index=0,
                                  part=part)]
        elif item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [],
                    "logprobs": self._logprobs}
            item["content"] = [part]
            events = [self._event("response.output_text.done", **place, content_index=0,
                                  text=text, logprobs=self._logprobs),
                      self._event("response.content_part.done", **place, content_index=0,
                                  part=part)]
        else:
            item["arguments"] = text
            events = [self._event("response.function_call_arguments.done", **place,
                                  name=item["name"], arguments=text)]
        item["status"] = status
        events.append(self._event("response.output_item.done",
                                  output_index=place["output_index"], item=copy.deepcopy(item)))
        self.response["output"].append(item)
        self._open, self._text, self._call_index, self._logprobs = None, [], None, []
        return events


def _whitespace_tail(logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The logprobs of the whitespace-only tokens at the end of `logprobs`."""
    cut = len(logprobs)
    while cut and not str(logprobs[cut - 1].get("token", "")).strip():
        cut -= 1
    return logprobs[cut:]
