"""The parser framework's types: results, events and the tool-format plug-in interface.

A *tool format* plugs into the streaming interpreter (`interpreter.StreamParser`) through two
small classes defined here, `ToolFormat` and `ToolSection`; parsers/README.md explains the
protocol with an example (`tools/tool_format.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One completed tool call; `arguments` is JSON text (an object)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedMessage:
    """What a model wrote, split OpenAI's way. Empty text is None."""

    reasoning: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


# ---- events: what the interpreter and tool sections produce; each becomes one delta dict ----


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str


@dataclass(frozen=True, slots=True)
class Content:
    text: str


@dataclass(frozen=True, slots=True)
class ToolStart:
    """A new call begins. `id` None lets the interpreter assign `chatcmpl-tool-<16 hex>`."""

    name: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolArgs:
    """More argument JSON text for the call most recently started."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolEnd:
    """The current call is complete (its arguments concatenate to valid JSON)."""


Event = Reasoning | Content | ToolStart | ToolArgs | ToolEnd


@dataclass(frozen=True)
class ToolContext:
    """What a tool section may read about the request."""

    tools: Sequence[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tokenizer: Any = None


class ToolSection:
    """The body parser for one tool section, created when a start marker is seen.

    The interpreter calls `feed` with the text that follows the start marker (and then every later
    delta) until `feed` reports the section closed by returning the unconsumed remainder.
    """

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        """Consume `text`; return (events, None) while the section stays open, or
        (events, rest) once it closes, `rest` being the text after the closing marker (the
        interpreter scans it as content again). Must never raise on model output."""
        raise NotImplementedError

    def finish(self) -> list[Event]:
        """The output ended inside the section (truncated or unclosed): flush by the format's
        policy, e.g. a complete body becomes a call and a broken one becomes `Content`."""
        raise NotImplementedError


class ToolFormat:
    """A tool-call syntax. Subclass, set the class attributes, implement `open_section`.

    start_markers: text markers that open a tool section. Met in content, they call
        `open_section`; met in reasoning they end reasoning implicitly first (when
        `ends_reasoning`), so a model that forgets `</think>` still gets its calls parsed.
    special_markers: every marker of the format that may be a special token (start, inner and end
        markers). With a tokenizer, single-token ones are recognised by id, so a detokenizer that
        skips special tokens loses nothing. Defaults to `start_markers`.
    anchored_markers: start markers that open a section only at the start of the answer (no
        content and no call before them, whitespace aside; reasoning does not count), e.g. a bare
        `[` or `{`. Anywhere else they are text, and they never end reasoning.
    keeps_whitespace: the whitespace between content and a section stays in the content
        (`I'll check. <section>` gives `I'll check. `), as vLLM's parser for the format keeps it.
    kept_whitespace_trim: characters stripped from the end of that whitespace (ERNIE 4.5's
        `\n`: vLLM strips only the newlines before its first call).
    keeps_text_verbatim: the text after a section is content as written, its leading whitespace
        included (`CALL \nDone.` gives ` \nDone.`); whitespace-only content is still none.
    content_drop: markers dropped wherever they appear in content (answer wrappers).
    anchor_after: literals after which, in content before any call, the anchored markers open
        a section again (xLAM's `<think>..</think>[{...}]`, read as vLLM does).
    reasoning_end_markers: the start markers that end reasoning implicitly (None: every one;
        DeepSeek-V4's bare `<｜DSML｜invoke` drafted in thinking is thinking).
    reasoning_parser: the reasoning parser used when none is named (vLLM's Cohere tool parsers
        split the thinking themselves).
    engine: the vLLM parser engine that reads this tool format with a reasoning format naming
        the same engine (`ReasoningFormat.engine`).
    content_join: the text and the text after a call, both stripped, are joined by this (and
        the output's trailing whitespace dropped once a call was read): Apertus' `\n`, as
        vLLM's parser joins them. None: the whitespace rules of the interpreter.
    """

    start_markers: tuple[str, ...] = ()
    special_markers: tuple[str, ...] = ()
    anchored_markers: tuple[str, ...] = ()
    ends_reasoning: bool = True
    keeps_whitespace: bool = False
    kept_whitespace_trim: str = ""
    keeps_text_verbatim: bool = False
    content_drop: tuple[str, ...] = ()
    anchor_after: tuple[str, ...] = ()
    reasoning_end_markers: tuple[str, ...] | None = None
    reasoning_parser: str | None = None
    content_join: str | None = None
    engine: str = ""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        raise NotImplementedError

    def all_special_markers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.start_markers, *self.special_markers)))
