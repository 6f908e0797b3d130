"""A ``ToolSpec`` plugged into the framework's interpreter (``thinkgate.parsers.types``)."""

from __future__ import annotations

from thinkgate.parsers.types import (
    Content,
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolFormat,
    ToolSection,
    ToolStart,
)

from . import section
from .coerce_args import ArgsCoercer
from .convert import tool_parameters
from .events import ArgsDelta, CallEnd, CallStart
from .repair import json_completion
from .spec import ToolSpec


class SpecSection(ToolSection):
    """Adapts a ``RegionReader`` to the framework's events; repairs cut-off arguments."""

    def __init__(self, spec: ToolSpec, marker: str, ctx: ToolContext) -> None:
        self.reader = section.RegionReader(spec.region_for(marker), marker, ctx.tools)
        self.args: list[str] | None = None  # argument text of the call still open
        self.tools = ctx.tools if spec.coerce_args else None
        self.coercer: ArgsCoercer | None = None  # retypes the open call's arguments

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events, rest = self.reader.feed(text)
        return self._convert(events), rest

    def finish(self) -> list[Event]:
        out = self._convert(self.reader.finish())
        if self.args is not None:
            suffix = json_completion("".join(self.args))
            if self.coercer is not None:
                suffix = self.coercer.feed(suffix) + self.coercer.finish()
            if suffix:
                out.append(ToolArgs(suffix))
            self.args = self.coercer = None
        return out

    def _convert(self, events: list) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if isinstance(ev, CallStart):
                out.append(ToolStart(ev.name, ev.call_id))
                self.args = []
                params = tool_parameters(self.tools, ev.name) if self.tools else None
                self.coercer = ArgsCoercer(params) if params else None
            elif isinstance(ev, ArgsDelta):
                text = ev.text if self.coercer is None else self.coercer.feed(ev.text)
                if text or self.coercer is None:
                    out.append(ToolArgs(text))
                if self.args is not None:
                    self.args.append(ev.text)
            elif isinstance(ev, CallEnd):
                tail = self.coercer.finish() if self.coercer is not None else ""
                out += [ToolArgs(tail)] if tail else []
                out.append(ToolEnd())
                self.args = self.coercer = None
            elif isinstance(ev, section.Content):  # "" too: a dropped region's whitespace stays
                out.append(Content(ev.text))
        return out


class SpecToolFormat(ToolFormat):
    """The tool format for one ``ToolSpec``."""

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec
        self.start_markers = spec.start_markers()
        self.special_markers = spec.special_markers()
        self.anchored_markers = spec.anchored
        self.anchor_after = spec.anchor_after
        self.keeps_whitespace = spec.keep_ws
        self.kept_whitespace_trim = spec.keep_ws_trim
        self.content_drop = spec.content_drop
        self.keeps_text_verbatim = spec.verbatim
        self.reasoning_parser = spec.reasoning
        self.content_join = spec.join
        self.engine = spec.engine
        if spec.ends_reasoning_at is not None:
            self.reasoning_end_markers = spec.ends_reasoning_at
        # "[" / "{" are everyday characters in thinking: they must not end it
        self.ends_reasoning = spec.ends_reasoning and all(len(m) > 1 for m in self.start_markers)

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return SpecSection(self.spec, marker, ctx)
