"""The header states of a tool region's reader (``section.RegionReader``): the call's name (and
the id some formats write with it), and the names' rules (Kimi's ``functions.NAME:INDEX`` ids,
doubled ``NAME.NAME``, names the request does not offer). Also ``Content``, the text a region
gives back.
"""

from __future__ import annotations

import re
from typing import Any

from .events import Event
from .json_body import JsonCallBody, JsonListBody
from .scan import split_on_markers
from .spec import Region
from .xml_body import parse_attrs

KIMI_ID = re.compile(r":\s*\d+\s*$")
_FIRST_KEY = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)"\s*:')  # `{"key":`
_FIRST_KEY_DONE = re.compile(r'\{\s*[^\s"]')  # an object whose first token is no key
MAX_HEADER = 256
IDENT = re.compile(r"[A-Za-z_][\w.\-]*")
KEPT_MARKERS = ("{", "[")
WS = " \t\r\n"


class Content:
    """Text the region gives back as content (a region that was not a call)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def kimi_name(header: str) -> str:
    name = header.strip()
    if name.startswith("functions."):
        name = name[len("functions."):]
    head, colon, idx = name.rpartition(":")
    return head if colon and idx.strip().isdigit() else name


def without_marker(text: str, markers: tuple[str, ...]) -> str:
    """``text`` less its leading start marker(s) and the whitespace after them."""
    changed = True
    while changed:
        changed = False
        for m in markers:
            if text.startswith(m):
                text, changed = text[len(m):].lstrip(WS), True
    return text


def registered(tools: list[dict[str, Any]] | None) -> set[str]:
    return {fn.get("name") for t in tools or () if isinstance(t, dict)
            for fn in [t.get("function", t)] if isinstance(fn, dict)}


def collapse_doubled(name: str, tools: list[dict[str, Any]] | None) -> str:
    """``NAME.NAME`` -> ``NAME`` when only the bare ``NAME`` is a registered tool."""
    names = registered(tools)
    head, dot, tail = name.partition(".")
    if names and name not in names and dot and head == tail and head in names:
        return head
    return name


class HeaderStates:
    """The reader's ``header``, ``call_id`` and ``skip`` states (a mixin of ``RegionReader``,
    whose state and ``_give_back`` they use)."""

    r: Region
    tools: list[dict[str, Any]] | None
    raw: list[str] | None
    state: str
    buf: str
    header: str
    name: str
    call_id: str | None
    skipping: bool
    body: Any

    def _give_back(self, rest: str, overflow: bool = False) -> tuple[list[Event], str]:
        raise NotImplementedError

    def _header(self) -> tuple[list[Event], str | bool | None]:
        h = self.r.header
        assert h is not None
        if self.r.list_alt and not self.header.strip():
            s = self.buf.lstrip(WS)
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
            self.call_id, self.name = text, kimi_name(text)
            # a malformed id (no `:INDEX`) makes vLLM's Kimi K2 skip the call
            self.skipping = self.r.strict_ids and not KIMI_ID.search(text)
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
            self.name = collapse_doubled(self.name, self.tools)
        if self.r.known_names and self.tools and self.raw is not None \
                and self.name not in registered(self.tools):
            return self._give_back(self.buf)
        if self.r.drop_unknown and self.tools and self.name not in registered(self.tools):
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
