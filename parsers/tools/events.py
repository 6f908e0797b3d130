"""Events a tool-call body emits, and the interface every body reader implements."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallStart:
    name: str
    call_id: str | None = None  # the format's own id (Kimi's header), else the stream assigns one


@dataclass(frozen=True)
class ArgsDelta:
    text: str


@dataclass(frozen=True)
class CallEnd:
    pass


Event = CallStart | ArgsDelta | CallEnd


def args_entry(num: int, key: str, value: Any) -> ArgsDelta:
    """The `num`-th `"key": value` entry of a call's arguments object (entry 1 opens it)."""
    prefix = "{" if num == 1 else ", "
    return ArgsDelta(prefix + json.dumps(key, ensure_ascii=False) + ": "
                     + json.dumps(value, ensure_ascii=False))


class Body:
    """Reads one body incrementally.

    ``feed(text)`` returns ``(events, rest)``: ``rest`` is None while the body continues, or the
    text after the body once it is over. ``failed`` is set when the text breaks the syntax before
    any call started, so the caller can give the raw text back as content. ``finish`` is called at
    end of output inside the body.
    """

    failed = False
    started = False

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        raise NotImplementedError

    def finish(self) -> list[Event]:
        return []
