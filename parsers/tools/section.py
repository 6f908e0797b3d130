"""The one reader of a tool region, driven by a ``Region`` (``spec.py``).

States: ``region`` (between calls of a section), ``header`` (the call's name), ``pre_body``
(an optional fence), ``body`` (a body reader from ``*_body.py``), ``after_body`` (closing
literals, a separator or the region's end). Until the first call starts, the raw text is kept so
a region that turns out not to be a call is given back as content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .convert import tool_parameters
from .events import ArgsDelta, Body, CallEnd, CallStart, Event
from .gemma_body import GemmaBody
from .json_body import JsonArgsBody, JsonCallBody, JsonListBody
from .nested_body import NestedXmlBody
from .pythonic_body import PythonicBody
from .scan import split_on_markers
from .spec import Region
from .xml_body import XmlParamsBody, parse_attrs

_KIMI_ID = re.compile(r":\s*\d+\s*$")
_FIRST_KEY = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)"\s*:')  # `{"key":`
_FIRST_KEY_DONE = re.compile(r'\{\s*[^\s"]')  # an object whose first token is no key
MAX_HEADER = 256
_IDENT = re.compile(r"[A-Za-z_][\w.\-]*")
KEPT_MARKERS = ("{", "[")
_WS = " \t\r\n"


class Content:
    """Text the region gives back as content (a region that was not a call)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _kimi_name(header: str) -> str:
    name = header.strip()
    if name.startswith("functions."):
        name = name[len("functions."):]
    head, colon, idx = name.rpartition(":")
    return head if colon and idx.strip().isdigit() else name


def _without_marker(text: str, markers: tuple[str, ...]) -> str:
    """``text`` less its leading start marker(s) and the whitespace after them."""
    changed = True
    while changed:
        changed = False
        for m in markers:
            if text.startswith(m):
                text, changed = text[len(m):].lstrip(_WS), True
    return text


def _registered(tools: list[dict[str, Any]] | None) -> set[str]:
    return {fn.get("name") for t in tools or () if isinstance(t, dict)
            for fn in [t.get("function", t)] if isinstance(fn, dict)}


def _collapse_doubled(name: str, tools: list[dict[str, Any]] | None) -> str:
    """``NAME.NAME`` -> ``NAME`` when only the bare ``NAME`` is a registered tool."""
    registered = _registered(tools)
    head, dot, tail = name.partition(".")
    if registered and name not in registered and dot and head == tail and head in registered:
        return head
    return name


class RegionReader:
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
                and _IDENT.fullmatch(name):
            # `[TOOL_CALLS]name` and the output ends: a call with no arguments (as vLLM reads it)
            self.raw = None
            return [CallStart(name, None), ArgsDelta("{}"), CallEnd()]
        h = self.r.header
        if self.state == "header" and h is not None and h.id_is_header and self.buf \
                and any(m.startswith(self.buf) for m in h.name_end) \
                and _KIMI_ID.search(self.header):
            # `functions.ping:0<|tool_call_argument_b` and the output ends: the id is whole, the
            # marker after it cut off: a call with no arguments (as vLLM's Kimi K2 reads it)
            text = self.header.strip()
            self.raw = None
            return [CallStart(_kimi_name(text), text), ArgsDelta("{}"), CallEnd()]
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
        return _without_marker(raw, self.r.begin) if self.r.bare_give_back else raw

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
            consumed = _without_marker(consumed, self.r.begin)
        self.raw = None
        return [Content(consumed)], rest  # type: ignore[list-item]

    # ---- states: each returns (events, None=need more | False=continue | str=region over) ----
    def _region(self) -> tuple[list[Event], str | bool | None]:
        r = self.r
        if r.json_alt and self.raw is not None:  # `{"name": .., "arguments": ..}` for the calls
            s = self.buf.lstrip(_WS)
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

    def _header(self) -> tuple[list[Event], str | bool | None]:
        h = self.r.header
        assert h is not None
        if self.r.list_alt and not self.header.strip():
            s = self.buf.lstrip(_WS)
            for m in self.r.begin:  # the start marker written twice (Mistral-7B v0.3)
                if s.startswith(m):
                    self.buf = s[len(m):]
                    return [], False
                if m.startswith(s) and s:
                    return [], None
            # nameless only right after the marker: pre-v11 output writes a space first
            nameless = self.r.nameless_calls and not self.header and s == self.buf
            if nameless and h.skip_to and s[:1] == "[":
                if s.startswith(h.skip_to):  # `[TOOL_CALLS][ARGS]{..}`: the name left out
                    self.buf, self.name, self.call_id = s[len(h.skip_to):], "", None
                    self.state = "pre_body"
                    return [], False
                if h.skip_to.startswith(s):
                    return [], None
            if s[:1] == "{" and nameless:
                key = _FIRST_KEY.match(s)
                if key is None and not _FIRST_KEY_DONE.match(s):
                    return [], None  # the first key decides: call object or arguments
                if key is not None and key.group(1) not in self.r.name_keys:
                    # v11 with the name left out: a call named "" (vLLM's engine does so)
                    self.buf, self.name, self.call_id, self.state = s, "", None, "pre_body"
                    return [], False
            if s[:1] in ("[", "{"):  # pre-v11: a JSON list of calls, or one call object
                self.buf = s
                self.state = "body"
                self.body = (JsonListBody(self.r.single_key, self.r.name_keys, self.r.args_keys)
                             if s[0] == "[" else
                             JsonCallBody(self.r.single_key, self.r.name_keys, self.r.args_keys))
                return [], False

        before, marker, self.buf = split_on_markers(self.buf, h.name_end + h.name_stop + self.r.end)
        self.header += before
        if marker is None:
            if len(self.header) > MAX_HEADER:
                return self._give_back(self.buf, overflow=True)
            return [], None
        if marker in h.name_stop or (marker in self.r.end and marker not in h.name_end):
            self.buf = marker + self.buf
        if self.r.list_alt and marker == "{" and self.header.rstrip().endswith("["):
            # junk, then a JSON list (what vLLM's regex fallback skips): the junk is text
            junk, self.header = self.header.rstrip()[:-1].strip(), ""
            self.buf, self.state = "[" + self.buf, "body"
            self.body = JsonListBody(self.r.single_key, self.r.name_keys, self.r.args_keys)
            return ([Content(junk)] if junk else []), False  # type: ignore[list-item]
        text = self.header.strip()
        for p in h.strip_prefixes:
            if text.startswith(p):
                text = text[len(p):].strip()
                break
        if h.attrs:
            self.name, attrs = parse_attrs(text, unescape=True)
            self.name = attrs.get("tool", self.name)
        elif h.id_is_header:
            self.call_id, self.name = text, _kimi_name(text)
            # a malformed id (no `:INDEX`) makes vLLM's Kimi K2 skip the call
            self.skipping = self.r.strict_ids and not _KIMI_ID.search(text)
        else:
            self.name, self.call_id = text.strip("\"'").strip(), None
        nameless = not self.name and self.r.nameless_calls and marker == h.skip_to
        if not self.name and self.r.drop_cut_off and marker in self.r.end:
            self.raw = None  # an empty block (`<tool_call></tool_call>`) is dropped
            return [Content("")], self.buf[len(marker):]  # type: ignore[list-item]
        if len(self.header) > MAX_HEADER:  # as when the header outgrows it while streamed
            return self._give_back(self.buf, overflow=True)
        if (not self.name and not nameless) or len(self.name) > MAX_HEADER or "<|" in self.name:
            # a marker inside the name (`<|plamo:begin_tool_nae:plamo|>write`): the format broke
            return self._give_back(self.buf)
        if self.r.collapse_doubled:
            self.name = _collapse_doubled(self.name, self.tools)
        if self.r.known_names and self.tools and self.raw is not None \
                and self.name not in _registered(self.tools):
            return self._give_back(self.buf)
        if self.r.drop_unknown and self.tools and self.name not in _registered(self.tools):
            # a call to a tool the request does not offer is dropped (vLLM's GLM and MiniMax
            # engines): the block is calls, not text
            self.skipping, self.raw = True, None
            self.state = "pre_body"
            return [Content("")], False  # type: ignore[list-item]
        skip = h.skip_to and marker in h.name_end and marker != h.skip_to
        self.state = "skip" if skip else "pre_body"
        if skip and marker == h.id_marker:
            self.state, self.header = "call_id", ""
        return [], False

    def _call_id(self) -> tuple[list[Event], str | bool | None]:
        """The format's own id, written between ``id_marker`` and ``skip_to``."""
        assert self.r.header is not None
        before, marker, self.buf = split_on_markers(self.buf, (self.r.header.skip_to,))
        self.header += before
        if marker is None:
            if len(self.header) > MAX_HEADER:
                return self._give_back(self.buf, overflow=True)
            return [], None
        self.call_id = self.header.strip() or None
        self.state = "pre_body"
        return [], False

    def _skip(self) -> tuple[list[Event], str | bool | None]:
        assert self.r.header is not None
        before, marker, self.buf = split_on_markers(self.buf, (self.r.header.skip_to,))
        if marker is None:
            return [], None
        self.state = "pre_body"
        return [], False

    def _pre_body(self) -> tuple[list[Event], str | bool | None]:
        prefixes = (("```json", "```") if self.r.fence else ()) + self.r.optional_prefixes
        if prefixes:
            s = self.buf.lstrip(_WS) if self.r.fence else self.buf
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
        s = self.buf.lstrip(_WS)
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

