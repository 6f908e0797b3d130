"""The state machine of one output: `StreamParser` (see parsers/README.md, "The state machine").

States: REASONING, CONTENT, TOOL (a `ToolSection` owns the text) and DISCARD (a dropped channel).
Whitespace next to reasoning markers follows the reasoning format's `whitespace` ("strip": dropped,
`<think>\\n..\\n</think>\\n\\nHi` gives reasoning `..` and content `Hi`; "keep": as written;
"trail": as written but the end of the reasoning trimmed); a tool format with `keeps_whitespace`
keeps the whitespace between content and its section. Whitespace at the very start and end of the
output is kept, and so is whitespace around a section that gives its text back as content; content
on both sides of a call keeps one gap. A tool format's `anchored_markers` open a section only at
the start of the answer (before any content or call). Deltas are written by `DeltaWriter`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thinkgate.parsers.deltas import DeltaWriter
from thinkgate.parsers.roles import CONTENT, DISCARD, REASONING, TOOL
from thinkgate.parsers.types import ToolContext, ToolSection


class StreamParser(DeltaWriter):
    """Incremental state for one output. Work per `feed` is O(len(delta) + longest marker)."""

    # slots: past ~30 instance attributes CPython's per-instance dict gets slower to read, and
    # every delta reads a dozen of them
    __slots__ = (
        "_p", "_ctx", "_thinking", "_content_key", "_state", "_buf", "_section", "_strip_lead",
        "_seg_empty", "_last_was_marker", "_pending_ws", "_gap", "_open_ws", "_gap_lead", "_head",
        "_prefix", "_force", "_end_strip", "_watch", "_filters", "_answer_text",
        "_reasoning_parts", "_content_seen", "_num_calls", "_at_start", "_section_ws",
        "_section_calls", "num_completed_calls", "finished", "_out", "_tail",
    )

    def __init__(self, parser: Any, tools: Sequence[dict[str, Any]] | None,
                 ckw: dict[str, Any], prompt_token_ids: Sequence[int] | None) -> None:
        self._p = parser
        self._ctx = ToolContext(tools, ckw, parser.tokenizer)
        fmt = parser.reasoning
        self._thinking = fmt is not None and fmt.thinking_enabled(ckw)
        self._content_key = "on" if self._thinking else "off"
        self._state = REASONING if self._thinking and fmt.starts_in_reasoning(ckw) else CONTENT
        if (self._state == REASONING and prompt_token_ids is not None
                and parser.tokenizer is not None
                and fmt.is_reasoning_end(prompt_token_ids, parser.tokenizer, ckw)):
            self._state = CONTENT
        self._buf = ""
        self._section: ToolSection | None = None
        self._strip_lead = False
        self._seg_empty = True
        self._last_was_marker = False
        self._pending_ws = ""
        self._gap = False  # the next content after a call keeps the whitespace before it
        self._open_ws = ""  # whitespace before the open section's marker
        self._gap_lead = ""  # whitespace after the last section, while `_gap`
        self._head: str | None = "" if self._state == REASONING and fmt.reasoning_head else None
        self._prefix = fmt.content_prefix if fmt is not None else ""
        self._force = bool(fmt and fmt.force_content_kwarg and ckw.get(fmt.force_content_kwarg))
        # characters still to strip after an end marker (thinking off: at the output's start)
        self._end_strip = fmt.after_end_strip if fmt is not None and not self._thinking else ""
        # only formats that need it pay for watching the answer's text / filtering it
        self._watch = self._force or bool(fmt is not None and fmt.after_end_strip)
        make = fmt.text_filter if fmt is not None else None
        self._filters = {REASONING: make(), CONTENT: make()} if make is not None else None
        self._answer_text = False  # any text (whitespace too) came after thinking
        self._reasoning_parts: list[str] = []
        self._content_seen = False
        self._num_calls = 0
        self._at_start = True  # no content and no call yet: anchored markers may open a section
        self._tail = ""  # the content's last characters, for `ToolFormat.anchor_after`
        self._section_ws: str | None = None  # whitespace before the open section's marker
        self._section_calls = 0  # calls started before the open section
        self.num_completed_calls = 0
        self.finished = False
        self._out: list[dict[str, Any]] = []

    # ---- public ----
    @property
    def in_reasoning(self) -> bool:
        return self._state == REASONING

    def feed(self, delta_text: str, token_ids: Sequence[int] = ()) -> list[dict[str, Any]]:
        if self.finished:
            raise ValueError("feed() after finish(): this stream is closed")
        if token_ids and self._p._id_markers:
            delta_text = self._restore_markers(delta_text, token_ids)
        self._buf += delta_text
        self._run(final=False)
        return self._take()

    def finish(self) -> list[dict[str, Any]]:
        if self.finished:
            return []
        self._run(final=True)
        if self._state == TOOL and self._section is not None:
            self._events(self._section.finish())
            self._section = None
        self._flush_head()
        if self._pending_ws and (not self._last_was_marker or self._p._keep_rws) and not self._gap \
                and not (self._state == REASONING and self._p._trim_rtail) \
                and not self._p._rstrip \
                and (self._content_seen or not self._p._verbatim or not self._num_calls) \
                and not (self._p._join is not None and self._num_calls):
            self._emit(self._seg_kind(), self._pending_ws)
        self._pending_ws = ""
        if self._prefix and not self._content_seen and self._num_calls == 0:
            self._emit(CONTENT, "")  # the content prefix alone (minimax_m2_append_think: `<think>`)
        if self._force and not self._answer_text and self._num_calls == 0:
            text = "".join(self._reasoning_parts).strip()
            if text:
                self._emit(CONTENT, text)
        if self._filters is not None:
            self._flush_filter(REASONING)
            self._flush_filter(CONTENT)
        self.finished = True
        return self._take()

    # ---- the loop ----
    def _run(self, final: bool) -> None:
        buf, pos = self._buf, 0
        while True:
            if self._state == TOOL:
                events, rest = self._section.feed(buf[pos:])
                self._events(events)
                if rest is None:
                    buf, pos = "", 0
                    break
                self._section, self._state = None, CONTENT
                if self._num_calls == self._section_calls and not self._seg_empty:
                    self._section_ws = None  # given back as text: the segment goes on
                else:
                    self._boundary()
                    # content on both sides of a call keeps one gap: `a: CALL b` -> `a: b`
                    called = self._num_calls > self._section_calls
                    self._gap, self._gap_lead = called and self._content_seen, ""
                    if called and self._p._verbatim:  # the text after it, as written
                        self._gap, self._strip_lead = False, False
                buf, pos = rest, 0
                continue
            key = self._state if self._state in (REASONING, DISCARD) else self._content_key
            sets = self._p._sets if self._at_start or key in (REASONING, DISCARD) else self._p._late_sets
            markers = sets[key]
            hit = markers.next_marker(buf, pos, final)
            if hit is None:
                hold = 0 if final else markers.holdback(buf, pos)
                if final and self._p._partial_drop:
                    cut = markers.holdback(buf, pos)  # a marker cut off at the end: dropped
                    if cut >= self._p._partial_drop:
                        buf = buf[:len(buf) - cut]
                self._text(buf[pos:len(buf) - hold])
                buf, pos = buf[len(buf) - hold:], 0
                break
            start, end, marker = hit
            self._text(buf[pos:start])
            if marker in self._p._anchored and not self._at_start and key != REASONING:
                pos = start  # the text before it started the answer: scan again, as text
                continue
            role = self._p._roles[key][marker]
            if role == "anchor":  # text, after which the set with the anchored markers applies
                self._text(marker)
                pos = end
                continue
            pos = self._act(role, marker, start, end)
        self._buf = buf

    def _act(self, role: str, marker: str, start: int, end: int) -> int:
        """Apply a marker's role; return where scanning resumes."""
        self._last_was_marker = True
        ws = self._pending_ws
        if self._p._rstrip and role != "tool":  # the text before a marker loses its trailing
            self._pending_ws = ""             # whitespace; reasoning its leading one too
            if role != "drop":
                self._boundary()
            self._strip_lead = role == "start" or (role == "drop" and self._state == REASONING)
            if role in ("end", "implicit"):
                self._state = CONTENT
                return start if role == "implicit" else end
            if role == "start":
                self._state = REASONING
            elif role == "discard":
                self._state = DISCARD
            return end
        if role == "drop":
            if self._state == REASONING and self._seg_empty and self._p.reasoning.opening_ws_drop \
                    and not self._content_seen and marker in self._p.reasoning.start:
                self._pending_ws = ""  # `\n<think>..` in prefilled thinking (`opening_ws_drop`)
            # The text either side joins up: `a</think> b` -> `a b`, one run of whitespace kept.
            # At the start of a segment it is an opening (`<think>\n..`): strip like a boundary.
            after_call = self._p._verbatim and self._seg_empty and not self._strip_lead
            if not self._p._keep_rws and not after_call:  # verbatim: text after a call as written
                self._strip_lead = self._strip_lead or bool(self._pending_ws) or self._seg_empty
            return end
        keep = self._p._keep_rws and role in ("end", "implicit", "start", "discard")
        # whitespace the output opens with, before thinking starts (`opening_ws_content`)
        opening = role == "start" and self._state == CONTENT and not self._content_seen \
            and self._num_calls == 0 and self._p.reasoning.opening_ws_content
        if keep and self._pending_ws and self._state != DISCARD and (
                not self._seg_empty or self._state == REASONING or opening
                or (role == "discard" and self._state == CONTENT
                    and marker in self._p.reasoning.end)) and not (
                self._state == REASONING and self._p._trim_rtail):
            self._emit(self._seg_kind(), self._pending_ws)
        self._boundary()
        self._strip_lead = not keep
        if role == "end":
            self._state = CONTENT
            self._end_strip = self._p.reasoning.after_end_strip
        elif role == "discard":
            self._state = DISCARD
        elif role == "implicit":
            self._state = CONTENT
            return start  # the marker is read again, as content (usually a tool section)
        elif role == "start":
            self._state = REASONING
            if self._p.reasoning.reasoning_head:
                self._head = ""
        elif role == "tool":
            self._section_ws, self._section_calls, self._open_ws = ws, self._num_calls, ws
            self._section = self._p.tool.open_section(marker, self._ctx)
            self._state = TOOL
        return end

    def _boundary(self) -> None:
        self._flush_head()
        self._pending_ws, self._gap = "", False
        self._strip_lead = True
        self._seg_empty = True

    # ---- text of the current segment ----
    def _seg_kind(self) -> str:
        return REASONING if self._state == REASONING else CONTENT

    def _text(self, text: str) -> None:
        if text and self._state != DISCARD:
            if self._watch and self._state != REASONING:
                self._answer_text = True
                if self._end_strip:
                    stripped = text.lstrip(self._end_strip)
                    if stripped:
                        self._end_strip = ""
                    text = stripped
            if text:
                self._segment_text(self._seg_kind(), text)

    def _segment_text(self, kind: str, text: str) -> None:
        if self._strip_lead:
            body = text.lstrip()
            if self._gap and kind == CONTENT:
                self._gap_lead += text[:len(text) - len(body)]
            text = body
            if not text:
                return
            self._strip_lead = False
            if self._gap and kind == CONTENT:  # the whitespace before the call, else after it
                self._pending_ws = self._p._join if self._p._join is not None else (
                    self._open_ws or self._gap_lead)
        self._last_was_marker = False
        if kind == REASONING and self._head is not None:
            text = self._head + text
            for head in self._p.reasoning.reasoning_head:
                if text.startswith(head):
                    self._head, self._strip_lead = None, True
                    self._segment_text(kind, text[len(head):])
                    return
                if head.startswith(text):
                    self._head = text
                    return
            self._head = None
        body = text.rstrip()
        if not body:
            self._pending_ws += text
            return
        self._emit(kind, self._pending_ws + body)
        self._pending_ws, self._gap = text[len(body):], False

    def _flush_head(self) -> None:
        if self._head:
            head, self._head = self._head, None
            self._emit(REASONING, head)
        self._head = None
