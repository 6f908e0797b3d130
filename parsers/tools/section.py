"""The one reader of a tool region, driven by a ``Region`` (``spec.py``).

States: ``region`` (between calls of a section), ``header`` (the call's name), ``pre_body``
(an optional fence), ``body`` (a body reader from ``*_body.py``), ``after_body`` (closing
literals, a separator or the region's end). Until the first call starts, the raw text is kept so
a region that turns out not to be a call is given back as content.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .convert import tool_parameters
from .events import ArgsDelta, Body, CallEnd, CallStart, Event
from .gemma_body import GemmaBody
from .json_body import JsonArgsBody, JsonCallBody, JsonListBody
from .nested_body import NestedXmlBody
from .pythonic_body import PythonicBody
from .scan import split_on_markers
from .section_header import (
    IDENT,
    KEPT_MARKERS,
    KIMI_ID,
    WS,
    Content,
    HeaderStates,
    kimi_name,
    without_marker,
)
from .spec import Region
from .xml_body import XmlParamsBody


class RegionReader(HeaderStates):
    def __init__(self, region: Region, marker: str, tools: Sequence[dict[str, Any]] | None):
        self.r = region
        self.tools = list(tools) if tools else None
        self.raw: list[str] | None = [marker]  # None once a call has started
        self.state = ("region" if region.call_begin else "header" if region.header else
                      "pre_body" if region.optional_prefixes else "body")
        self.buf = marker if marker in KEPT_MARKERS else ""  # "[" / "{" open the body itself
        self.header = ""
        self.body: Body | None = None
        self.name = ""
        self.call_id: str | None = None
        self.open_call = False
        self.skipping = False  # the current call's events are dropped (`Region.strict_ids`)
        self.body_text: list[str] = []  # what the current body was fed (headerless regions)
        if self.state == "body":
            self.body = self._make_body(None)

    # ---- driving ----
    def feed(self, text: str) -> tuple[list[Event | Content], str | None]:
        if self.raw is not None:
            self.raw.append(text)
        events: list[Event | Content] = []
        self.buf += text
        while True:
            step = getattr(self, "_" + self.state)
            evs, done = step()
            if self.skipping:
                evs = self._skip_call(evs)
            events += self._track(evs)
            if done is None:
                return events, None
            if done is False:
                continue
            return events, done

    def finish(self) -> list[Event | Content]:
        events: list[Event | Content] = []
        name = (self.header + self.buf).strip()
        if self.state == "header" and self.r.list_alt and self.raw is not None \
                and IDENT.fullmatch(name):
            # `[TOOL_CALLS]name` and the output ends: a call with no arguments (as vLLM reads it)
            self.raw = None
            return [CallStart(name, None), ArgsDelta("{}"), CallEnd()]
        h = self.r.header
        if self.state == "header" and h is not None and h.id_is_header and self.buf \
                and any(m.startswith(self.buf) for m in h.name_end) \
                and KIMI_ID.search(self.header):
            # `functions.ping:0<|tool_call_argument_b` and the output ends: the id is whole, the
            # marker after it cut off: a call with no arguments (as vLLM's Kimi K2 reads it)
            text = self.header.strip()
            self.raw = None
            return [CallStart(kimi_name(text), text), ArgsDelta("{}"), CallEnd()]
        if self.state == "body" and self.body is not None:
            events += self._track(self.body.finish())
            if self.body.failed or (self.raw is not None and not self.body.started):
                if self.raw is None:  # a later body that is no call: its text stays content
                    return events + [Content(self._body_text(""))]
                return [Content(self._raw_text())]
        if self.raw is not None:
            return [Content("" if self.r.drop_cut_off else self._raw_text())]
        return events

    def _raw_text(self) -> str:
        raw = "".join(self.raw or [])
        return without_marker(raw, self.r.begin) if self.r.bare_give_back else raw

    def _skip_call(self, events: list) -> list:
        """Drop the events of a call being skipped, up to its end."""
        out = []
        for i, ev in enumerate(events):
            if isinstance(ev, CallEnd):
                self.skipping = False
                return out + self._skip_call(events[i + 1:]) if self.skipping else \
                    out + list(events[i + 1:])
            if not isinstance(ev, (CallStart, ArgsDelta)):
                out.append(ev)
        return out

    def _track(self, events: list[Event]) -> list[Event]:
        for ev in events:
            if isinstance(ev, CallStart):
                self.raw, self.open_call = None, True
            elif isinstance(ev, CallEnd):
                self.open_call = False
        return events

    def _body_text(self, rest: str) -> str:
        """What the current body consumed (``rest`` is what it did not), for a headerless
        region; a body after a header has no text of its own to give back."""
        fed, self.body_text = "".join(self.body_text), []
        if self.r.header is not None:
            return ""
        return fed[: len(fed) - len(rest)] if rest else fed

    def _give_back(self, rest: str, overflow: bool = False) -> tuple[list[Event], str]:
        """The region was not a call: everything but ``rest`` becomes content. A header that
        outgrew MAX_HEADER in a later call (no raw text kept) gives back its own text: the
        text after it reaches the content as it arrives, so a stream and a parse agree."""
        raw = "".join(self.raw or [])
        consumed = raw[: len(raw) - len(rest)] if rest else raw
        if overflow and self.raw is None:
            consumed = self.header
        if self.r.bare_give_back:
            consumed = without_marker(consumed, self.r.begin)
        self.raw = None
        return [Content(consumed)], rest  # type: ignore[list-item]

    # ---- states: each returns (events, None=need more | False=continue | str=region over) ----
    def _region(self) -> tuple[list[Event], str | bool | None]:
        r = self.r
        if r.json_alt and self.raw is not None:  # `{"name": .., "arguments": ..}` for the calls
            s = self.buf.lstrip(WS)
            if not s:
                return [], None
            if s[0] == "{":
                self.buf, self.state = s, "body"
                self.body = JsonCallBody(r.single_key, r.name_keys, r.args_keys)
                return [], False
        before, marker, self.buf = split_on_markers(self.buf, r.call_begin + r.call_end + r.end)
        if marker is None:
            return [], None
        if marker in r.call_begin:
            self.state, self.header = ("header" if r.header else "body"), ""
            if self.state == "body":
                self.body = self._make_body(None)
            return [], False
        if marker in r.end:
            rest, self.buf = self.buf, ""
            if self.raw is not None and r.strict_ids and not "".join(self.raw[1:])[
                    :len("".join(self.raw[1:])) - len(rest) - len(marker)].strip():
                self.raw = None  # an empty section is framing, not text (vLLM's Kimi K2)
                return [Content("")], rest  # type: ignore[list-item]
            if self.raw is not None:
                return self._give_back(rest)
            return [], rest
        return [], False

    def _pre_body(self) -> tuple[list[Event], str | bool | None]:
        prefixes = (("```json", "```") if self.r.fence else ()) + self.r.optional_prefixes
        if prefixes:
            s = self.buf.lstrip(WS) if self.r.fence else self.buf
            for prefix in prefixes:
                if s.startswith(prefix):
                    self.buf = s[len(prefix):]
                    break
                if prefix.startswith(s):
                    return [], None  # could still become the prefix
        self.state, self.body = "body", self._make_body(self.name)
        return [], False

    def _body(self) -> tuple[list[Event], str | bool | None]:
        assert self.body is not None
        text, self.buf = self.buf, ""
        if self.raw is None and self.r.header is None:
            self.body_text.append(text)
        events, rest = self.body.feed(text)
        if rest is None:
            return events, None
        if self.body.failed:
            if self.r.drop_empty_list and getattr(self.body, "empty", False) \
                    and self.raw is not None:
                self.raw = None  # `<|tool_call|> []`: no calls, and no text either
                return [Content("")], rest  # type: ignore[list-item]
            if self.raw is None:  # a later body that is no call: its text stays content
                return events + [Content(self._body_text(rest))], rest  # type: ignore[list-item]
            return self._give_back(rest)
        self.buf, self.state = rest, "after_body"
        return events, False

    def _after_body(self) -> tuple[list[Event], str | bool | None]:
        r = self.r
        s = self.buf.lstrip(WS)
        for lit in r.after_body:
            if s.startswith(lit):
                self.buf = s[len(lit):]
                return [], False
            if lit.startswith(s):
                return [], None
        if r.call_begin:
            self.state = "region"
            return [], False
        if r.sep and s.startswith(r.sep):
            self.buf, self.header = s[len(r.sep):], ""
            self.state = "header" if r.header else "body"
            if self.state == "body":
                self.body = self._make_body(None)
            return [], False
        for end in r.end:
            if s.startswith(end):
                return [], s[len(end):]
            if end.startswith(s):
                return [], None
        if r.sep and r.sep.startswith(s):
            return [], None
        rest, self.buf = self.buf, ""
        return [], rest

    def _make_body(self, name: str | None) -> Body:
        r = self.r
        self.body_text = []
        stops = r.call_end + r.end + r.call_begin
        if r.body == "json_call":
            return JsonCallBody(r.single_key, r.name_keys, r.args_keys, r.args_required,
                                r.hold_args)
        if r.body == "json_list":
            return JsonListBody(r.single_key, r.name_keys, r.args_keys, r.args_required)
        if r.body == "pythonic":
            return PythonicBody(stops)
        assert name is not None
        if r.body == "json_args":
            return JsonArgsBody(name, self.call_id, r.call_end + r.end)
        if r.body == "gemma":
            return GemmaBody(name, r.string_delim, r.call_close,
                             keep_cut=r.string_delim == '<|"|>',
                             params=tool_parameters(self.tools, name))
        if r.body == "nested_xml":
            return NestedXmlBody(name, self.call_id, r.namespace,
                                 tool_parameters(self.tools, name), r.call_close, stops)
        assert r.params is not None
        return XmlParamsBody(name, self.call_id, r.params, tool_parameters(self.tools, name),
                             r.call_close, stops)

