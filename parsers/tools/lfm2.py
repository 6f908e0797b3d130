"""LFM2's echo: after a `<|tool_call_start|>[...]<|tool_call_end|>` block the model often
writes the call list again, capped by a second `<|tool_call_end|>`. vLLM's `lfm2` parser drops
that echo (everything through the orphan end marker); so does this section.

After the block closes, text that opens (past whitespace) with `[` is held; an orphan
`<|tool_call_end|>` drops it with the marker, anything else (another start marker, the end of
the output) gives it back as content. Other text after the block is content at once. Holding
is limited to the echo; per-delta work stays O(len(delta)) but for the one join at its end.
"""

from __future__ import annotations

from thinkgate.parsers.types import Content, Event, ToolContext, ToolSection

from .tool_format import SpecSection, SpecToolFormat

START, END = "<|tool_call_start|>", "<|tool_call_end|>"


class EchoDroppingSection(ToolSection):
    def __init__(self, inner: ToolSection) -> None:
        self.inner: ToolSection | None = inner
        self.held: list[str] = []
        self.echo = False  # the held text opened with `[`
        self.tail = ""  # the last len(END) - 1 characters of the echo, to find a split marker

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events: list[Event] = []
        if self.inner is not None:
            events, rest = self.inner.feed(text)
            if rest is None:
                return events, None
            self.inner, text = None, rest
        return events, self._after_block(text)

    def _after_block(self, text: str) -> str | None:
        """None while the text may still be an echo; else the text that follows the block."""
        self.held.append(text)
        if self.echo:
            window = self.tail + text
        else:
            window = "".join(self.held)  # whitespace only, until now
            lead = window.lstrip()
            if not lead:
                return None
            if lead[0] != "[":
                self.held = []
                return window
            self.echo = True
        at, stop = window.find(END), window.find(START)
        if at >= 0 or stop >= 0:
            full, self.held, self.echo, self.tail = "".join(self.held), [], False, ""
            if at >= 0 and (stop < 0 or at < stop):  # the echo and its end marker dropped
                return full[len(full) - len(window) + at + len(END):]
            return full
        self.tail = window[-(len(END) - 1):]
        return None

    def finish(self) -> list[Event]:
        if self.inner is not None:
            return self.inner.finish()
        held, self.held = "".join(self.held), []
        return [Content(held)] if held else []


class Lfm2Format(SpecToolFormat):
    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return EchoDroppingSection(SpecSection(self.spec, marker, ctx))
