"""Events a tool-call body emits, and the interface every body reader implements."""

from __future__ import annotations

from dataclasses import dataclass


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
