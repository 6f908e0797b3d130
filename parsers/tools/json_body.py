"""JSON bodies: a call object ``{"name", "arguments"}``, a list of them, or bare arguments.

Argument text is forwarded raw, as the model writes it; only a call object that writes
``arguments`` before ``name`` buffers it until the name is known.
"""

from __future__ import annotations

import json

from .events import ArgsDelta, Body, CallEnd, CallStart, Event
from .repair import json_completion
from .scan import ValueScanner, split_on_markers

NAME_KEYS = ("name", "tool_name", "function")
ARGS_KEYS = ("arguments", "parameters", "args", "tool_input")
ID_KEYS = ("id", "tool_call_id")
_WS = " \t\r\n"


class JsonArgsBody(Body):
    """A bare JSON arguments value after a header that named the call. The call starts with
    the value's first character; a body that does not start like JSON is not a call.

    ``stops`` (the region's call-end / end markers) end the value even mid-string: a call cut
    short (`{"city": "Bei<|tool_call_end|>`) is closed there, its arguments completed to JSON."""

    def __init__(self, name: str, call_id: str | None = None,
                 stops: tuple[str, ...] = ()) -> None:
        self.scanner = ValueScanner()
        self.start = CallStart(name, call_id)
        self.any_args = False
        self.stops = stops
        self.held = ""
        self.sent: list[str] = []  # argument text so far (to close it where it is cut short)

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        if not self.stops:
            return self._scan(text)
        before, marker, held = split_on_markers(self.held + text, self.stops)
        self.held = "" if marker is not None else held
        events, rest = self._scan(before)
        if rest is not None:
            return events, rest + (marker or "") + (held if marker is not None else self.held)
        if marker is None:
            return events, None
        if not self.started:  # nothing before the call's end: a call without arguments
            self.started = True
            return events + [self.start, ArgsDelta("{}"), CallEnd()], marker + held
        suffix = json_completion("".join(self.sent))
        events += [ArgsDelta(suffix)] if suffix else []
        return events + [CallEnd()], marker + held

    def _scan(self, text: str) -> tuple[list[Event], str | None]:
        if not self.started and text.lstrip(_WS)[:1] not in ("", "{"):
            self.failed = True  # arguments are an object: anything else is no call
            return [], text
        n = self.scanner.feed(text)
        if self.scanner.bad and not self.started and not text[:n].strip(_WS):
            self.failed = True
            return [], text[n:]
        events: list[Event] = []
        chunk = text[:n] if self.any_args else text[:n].lstrip(_WS)
        if chunk:
            if not self.started:
                self.started = True
                events.append(self.start)
            self.any_args = True
            events.append(ArgsDelta(chunk))
            self.sent.append(chunk)
        if self.scanner.bad and self.started:  # text that is not JSON ends the arguments
            suffix = json_completion("".join(self.sent))
            events += [ArgsDelta(suffix)] if suffix else []
        if self.scanner.bad or self.scanner.done:
            self.held, held = "", self.held
            return events + [CallEnd()], text[n:] + held
        return events, None

    def finish(self) -> list[Event]:
        if self.held:
            held, self.held = self.held, ""
            events, _ = self._scan(held)
            if events:
                return events + self.finish()
        self.scanner.close_scalar()
        if not self.started:
            self.failed = True
            return []
        return [CallEnd()] if self.scanner.done else []


class JsonCallBody(Body):
    """One object naming a call: ``{"name": ..., "arguments": {...}}`` (keys by family).

    ``single_key`` reads Apertus' ``{"NAME": {args}}`` instead. ``args_required``: an object
    without an arguments key is not a call (Llama's ``{"name": "x"}`` stays text); the call
    then starts at the arguments key, not at the name. ``hold_args``: the arguments are held
    until their value ends and the object is a call only when they are JSON (Llama 3's
    ``{"parameters": {invalid json}}`` stays text, as in vLLM); the call starts there, whole.
    """

    def __init__(self, single_key: bool = False, name_keys: tuple[str, ...] = NAME_KEYS,
                 args_keys: tuple[str, ...] = ARGS_KEYS, args_required: bool = False,
                 hold_args: bool = False) -> None:
        self.single_key = single_key
        self.args_required = args_required
        self.hold_args = hold_args
        self.invalid = False  # held arguments that are not JSON
        self.args_sent: list[str] = []  # argument text streamed after the call started
        self.name_keys, self.args_keys = name_keys, args_keys
        self.state = "open"  # open, key, colon, value, comma, done
        self.key_buf = ""
        self.key_scanner: ValueScanner | None = None
        self.value_scanner: ValueScanner | None = None
        self.role = ""  # what the value being read is: name, args, id, skip
        self.name: str | None = None
        self.call_id: str | None = None
        self.args_buf: list[str] = []  # arguments read before the name
        self.args_done = False
        self.any_args = False
        self.args_in_string = False
        self.scratch = ""  # the raw text of a name/id value (or of string-encoded arguments)

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events: list[Event] = []
        i, n = 0, len(text)
        while i < n:
            st = self.state
            ch = text[i]
            if st in ("open", "colon", "comma") or (st == "key" and self.key_scanner is None):
                if ch in _WS:
                    i += 1
                    continue
                if st == "open":
                    if ch != "{":
                        return self._fail(events, text[i:])
                    self.state = "key"
                elif st == "colon":
                    if ch != ":":
                        return self._fail(events, text[i:])
                    self.state = "value"
                    self.value_scanner = ValueScanner()
                elif st == "comma":
                    if ch == "}":
                        self.state = "done"
                        return events + self._close(), text[i + 1:]
                    if ch != ",":
                        return self._fail(events, text[i:])
                    self.state = "key"
                else:  # a key starts
                    if ch == "}":
                        self.state = "done"
                        return events + self._close(), text[i + 1:]
                    if ch != '"':
                        return self._fail(events, text[i:])
                    self.key_scanner = ValueScanner()
                    self.key_buf = ""
                    continue
                i += 1
                continue
            if st == "key":
                assert self.key_scanner is not None
                k = self.key_scanner.feed(text[i:])
                self.key_buf += text[i:i + k]
                i += k
                if self.key_scanner.done:
                    try:
                        key = json.loads(self.key_buf)
                    except ValueError:  # a raw control character in the key: not JSON
                        return self._fail(events, text[i:])
                    events += self._start_value(key)
                    self.key_scanner = None
                    self.state = "colon"
                continue
            # st == "value"
            assert self.value_scanner is not None
            k = self.value_scanner.feed(text[i:])
            events += self._value_text(text[i:i + k])
            i += k
            if self.value_scanner.bad:
                return self._fail(events, text[i:])
            if self.value_scanner.done:
                events += self._end_value()
                if self.invalid:
                    return self._fail(events, text[i:])
                self.state = "comma"
        return events, None

    def _start_value(self, key: str) -> list[Event]:
        self.scratch = ""
        if self.single_key and self.name is None:
            self.name, self.role = key, "args"
            return self._start()
        elif not self.single_key and key in self.name_keys and self.name is None:
            self.role = "name"
        elif not self.single_key and key in self.args_keys and not self.args_done:
            self.role = "args"
            if self.args_required and self.name is not None and not self.started \
                    and not self.hold_args:
                return self._start()
        elif key in ID_KEYS:
            self.role = "id"
        else:
            self.role = "skip"
        return []

    def _value_text(self, chunk: str) -> list[Event]:
        if self.role in ("name", "id"):
            self.scratch += chunk
        elif self.role == "args":
            if not self.any_args:
                chunk = chunk.lstrip(_WS)
                self.args_in_string = chunk.startswith('"')
            if self.args_in_string:  # arguments JSON-encoded as a string: decoded at its end
                self.scratch += chunk
                self.any_args = self.any_args or bool(chunk)
                return []
            if chunk:
                self.any_args = True
                if self.started and not self.hold_args:
                    self.args_sent.append(chunk)
                    return [ArgsDelta(chunk)]
                self.args_buf.append(chunk)
        return []

    def _end_value(self) -> list[Event]:
        role, self.role = self.role, ""
        if role in ("name", "id"):
            try:
                value = json.loads(self.scratch)
            except ValueError:
                value = None
            if isinstance(value, str) and role == "name":
                self.name = value
            elif isinstance(value, str):
                self.call_id = value
        elif role == "args":
            self.args_done = True
            if self.args_in_string:
                return self._string_args()
            if self.hold_args and not self._held_args_are_json():
                return []
        if self.name is not None and not self.started and (
                self.args_done or (role == "name" and not self.args_required)):
            return self._start()
        return []

    def _held_args_are_json(self) -> bool:
        try:
            json.loads("".join(self.args_buf))
        except ValueError:
            self.invalid = True
            return False
        return True

    def _string_args(self) -> list[Event]:
        try:
            decoded = json.loads(self.scratch)
            ok = isinstance(json.loads(decoded), dict)
        except (ValueError, TypeError):
            ok = False
        text = decoded if ok else "{}"
        if self.name is not None and not self.started:
            return self._start() + [ArgsDelta(text)]
        if self.started:
            return [ArgsDelta(text)]
        self.args_buf.append(text)
        return []

    def _start(self) -> list[Event]:
        self.started = True
        events: list[Event] = [CallStart(self.name or "", self.call_id)]
        if self.args_buf:
            events.append(ArgsDelta("".join(self.args_buf)))
            self.args_sent, self.args_buf = self.args_buf, []
        return events

    def _close(self) -> list[Event]:
        if not self.started:
            if self.name is None or (self.args_required and not self.args_done):
                self.failed = True
                return []
            events = self._start()
        else:
            events = []
        if not self.any_args:
            events.append(ArgsDelta("{}"))
        return events + [CallEnd()]

    def _fail(self, events: list[Event], rest: str) -> tuple[list[Event], str | None]:
        if not self.started:
            self.failed = True
            return events, rest
        if self.role == "args" and self.args_sent:  # arguments cut by text that is not JSON
            suffix = json_completion("".join(self.args_sent))
            events += [ArgsDelta(suffix)] if suffix else []
        return events + [CallEnd()], rest

    def finish(self) -> list[Event]:
        if not self.started:
            self.failed = True
        return []


class JsonListBody(Body):
    """``[call, call, ...]``: each element a call object read by ``item()``."""

    def __init__(self, single_key: bool = False, name_keys: tuple[str, ...] = NAME_KEYS,
                 args_keys: tuple[str, ...] = ARGS_KEYS, args_required: bool = False) -> None:
        self.kw = {"single_key": single_key, "name_keys": name_keys, "args_keys": args_keys,
                   "args_required": args_required}
        self.state = "open"  # open, item_or_close, item, comma, skip
        self.item: JsonCallBody | None = None
        self.skip = ValueScanner()
        self.empty = False  # the list closed with no call in it: `[]`

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events: list[Event] = []
        i, n = 0, len(text)
        while i < n:
            if self.state == "skip":
                i += self.skip.feed(text[i:])
                if self.skip.bad:
                    return self._fail(events, text[i:])
                if self.skip.done:
                    self.state = "comma"
                continue
            if self.state == "item":
                assert self.item is not None
                evs, rest = self.item.feed(text[i:])
                events += evs
                self.started = self.started or self.item.started
                if rest is None:
                    return events, None
                if self.item.failed:
                    return self._fail(events, rest)
                self.state = "comma"
                i = n - len(rest)
                continue
            ch = text[i]
            i += 1
            if ch in _WS:
                continue
            if self.state == "open":
                if ch != "[":
                    return self._fail(events, text[i - 1:])
                self.state = "item_or_close"
            elif ch == "]" and self.state in ("item_or_close", "comma"):
                if not self.started:
                    self.failed = self.empty = True  # an empty list is not a call
                return events, text[i:]
            elif ch == "," and self.state == "comma":
                self.state = "item_or_close"
            elif ch == "{" and self.state == "item_or_close":
                self.item = JsonCallBody(**self.kw)
                self.state = "item"
                i -= 1
            elif self.state == "item_or_close" and self.started:
                # an entry that is not a call object (`"junk"`, `42`) after a call: skipped
                self.skip, self.state = ValueScanner(), "skip"
                i -= 1
            else:
                return self._fail(events, text[i - 1:])
        return events, None

    def _fail(self, events: list[Event], rest: str) -> tuple[list[Event], str | None]:
        if not self.started:
            self.failed = True
        return events, rest

    def finish(self) -> list[Event]:
        if not self.started:
            self.failed = True
        return []
