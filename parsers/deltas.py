"""How the state machine's results become OpenAI deltas: `DeltaWriter`, a base of `StreamParser`.

Text of a kind (reasoning or content) joins the previous delta when that one holds only the same
kind; a `ToolStart` opens a delta with the call's index, id, type and name; `ToolArgs` append to
the open call's `arguments`. A format's text filters run here, on the way out.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from thinkgate.parsers.roles import CONTENT, REASONING
from thinkgate.parsers.types import Content, Event, Reasoning, ToolArgs, ToolEnd, ToolStart


class DeltaWriter:
    """The output half of `StreamParser` (its slots are declared there)."""

    __slots__ = ()

    def _emit(self, kind: str, text: str) -> None:
        self._seg_empty = False
        if kind == CONTENT:
            self._at_start = False
            if self._p._anchor_after and not self._num_calls:
                self._tail = (self._tail + text)[-32:]
                tail = self._tail.rstrip()
                self._at_start = any(tail.endswith(a) for a in self._p._anchor_after)
            if self._prefix:
                text, self._prefix = self._prefix + text, ""
            self._content_seen = True
        elif self._force:
            self._reasoning_parts.append(text)
        if self._filters is not None:
            if kind == CONTENT:
                self._flush_filter(REASONING)
            text = self._filters[kind].feed(text)
            if not text:
                return
        last = self._out[-1] if self._out else None
        if last is not None and len(last) == 1 and kind in last:
            last[kind] += text
        else:
            self._out.append({kind: text})

    def _flush_filter(self, kind: str) -> None:
        """Emit what a text filter still holds (the reasoning's when the answer starts)."""
        rest = self._filters[kind].feed("", final=True)
        if not rest:
            return
        last = self._out[-1] if self._out else None
        if last is not None and len(last) == 1 and kind in last:
            last[kind] += rest
        else:
            self._out.append({kind: rest})

    def _events(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, Content):
                if self._section_ws is not None and self._num_calls == self._section_calls:
                    # the section hands back its text (not a call): it keeps its whitespace
                    self._pending_ws, self._section_ws = self._section_ws, None
                    self._strip_lead = False
                    if not ev.text and self._pending_ws and self._content_seen:
                        # a dropped section (no text of its own): the gap before it stays
                        self._emit(CONTENT, self._pending_ws)
                        self._pending_ws = ""
                        continue
                self._segment_text(CONTENT, ev.text)
            elif isinstance(ev, Reasoning):
                self._emit(REASONING, ev.text)
            elif isinstance(ev, ToolStart):
                if (self._p._keep_ws and self._section_ws and self._content_seen
                        and self._num_calls == self._section_calls):
                    kept = self._section_ws.rstrip(self._p.tool.kept_whitespace_trim) \
                        if self._p.tool.kept_whitespace_trim else self._section_ws
                    if kept:
                        self._emit(CONTENT, kept)
                    self._open_ws = ""
                self._pending_ws, self._section_ws, self._at_start = "", None, False
                if self._filters is not None:
                    self._flush_filter(REASONING)
                self._num_calls += 1
                call_id = ev.id or "chatcmpl-tool-" + secrets.token_hex(8)
                self._out.append({"tool_calls": [{
                    "index": self._num_calls - 1, "id": call_id, "type": "function",
                    "function": {"name": ev.name, "arguments": ""}}]})
            elif isinstance(ev, ToolArgs):
                if not ev.text or self._num_calls == 0:
                    continue
                last = self._out[-1] if self._out else None
                calls = last.get("tool_calls") if last is not None and len(last) == 1 else None
                if calls and calls[-1]["index"] == self._num_calls - 1:
                    calls[-1]["function"]["arguments"] += ev.text
                else:
                    self._out.append({"tool_calls": [{
                        "index": self._num_calls - 1, "function": {"arguments": ev.text}}]})
            elif isinstance(ev, ToolEnd):
                self.num_completed_calls += 1
                self._strip_lead = True

    def _take(self) -> list[dict[str, Any]]:
        out, self._out = self._out, []
        return out

    def _restore_markers(self, text: str, token_ids: Sequence[int]) -> str:
        """Put back single-token markers a detokenizer skipped (their ids are in `token_ids`)."""
        ids = self._p._id_markers
        missing = [i for i, t in enumerate(token_ids) if t in ids and ids[t] not in text]
        if not missing:
            return text
        if len(missing) == len(token_ids):
            return text + "".join(ids[token_ids[i]] for i in missing)
        decode = getattr(self._p.tokenizer, "decode", None)
        if decode is not None:
            pieces, run = [], []
            for t in token_ids:
                if t in ids:
                    pieces += [decode(run)] if run else []
                    pieces.append(ids[t])
                    run = []
                else:
                    run.append(t)
            pieces += [decode(run)] if run else []
            if "".join(p for p in pieces if p not in ids.values()) == text:
                return "".join(pieces)
        lead = "".join(ids[token_ids[i]] for i in missing)
        return lead + text if missing[0] == 0 else text + lead

