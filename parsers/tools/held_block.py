"""`HeldBlockSection`: a tool section held whole until its end marker, then read at once.

Formats whose parser in vLLM only decides at the block's end (every call valid, or the block
is text) stream nothing from inside the block. The section collects the deltas, looks for the
end marker in the last `len(close) - 1` characters plus the new delta (so a marker split over
deltas is found and per-delta work stays O(len(delta))), and joins the block once, at its end.
`read` turns the body into events, or None when the block stays content as written; a block
the output cuts off before its end marker is content too.
"""

from __future__ import annotations

from thinkgate.parsers.types import Content, Event, ToolSection


class HeldBlockSection(ToolSection):
    """Subclasses give the end marker and `read`; `opening` is the text that opened the block
    (given back with the body when the block is not read as calls)."""

    def __init__(self, opening: str, close: str) -> None:
        self.opening = opening
        self.close = close
        self.held: list[str] = []
        self.tail = ""  # the last len(close) - 1 characters, to find a split end marker

    def read(self, body: str) -> list[Event] | None:
        """The events of the complete block `body` (without its markers), or None: content."""
        raise NotImplementedError

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        close = self.close
        window = self.tail + text
        at = window.find(close)
        if at < 0:
            self.held.append(text)
            self.tail = window[-(len(close) - 1):]
            return [], None
        full = "".join(self.held) + text  # once per block, at its end
        pos = len(full) - len(window) + at
        body, rest = full[:pos], full[pos + len(close):]
        events = self.read(body)
        if events is None:
            return [Content(self.opening + body + close)], rest
        return events, rest

    def finish(self) -> list[Event]:
        return [Content(self.opening + "".join(self.held))]
