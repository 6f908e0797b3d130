"""A tool-call format as data: the regions that hold calls, the call header, the body syntax.

A *region* opens at one of its ``begin`` markers (a start marker of the format). Inside it the
calls are either written back to back (``call_begin`` markers, DeepSeek/Kimi/MiniMax sections) or
the region is one body (Hermes' ``<tool_call>{...}</tool_call>``, a JSON list, a pythonic list).
A *header* gives the name before the body where the body itself does not (``NAME{json}``,
``<function=NAME>``, ``functions.NAME:0``). The same data drives the parser (``section.py``),
the renderer the tests use (``render.py``) and the grammar (``grammar.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .xml_body import ParamSyntax

BODY_KINDS = ("json_call", "json_list", "json_args", "xml", "nested_xml", "pythonic", "gemma")


@dataclass(frozen=True)
class Header:
    name_end: tuple[str, ...] = ()     # consumed after the name: ">", "<｜tool▁sep｜>", "\n"
    name_stop: tuple[str, ...] = ()    # left for the body: "{", "<arg_key>"
    strip_prefixes: tuple[str, ...] = ()  # dropped from the header text: "function<｜tool▁sep｜>"
    skip_to: str = ""                  # after the name, skip up to and including this marker
    id_marker: str = ""                # a name_end after which the text up to skip_to is the
                                       # call's own id (Mistral's [CALL_ID])
    id_is_header: bool = False         # Kimi: the header is the call id, "functions.NAME:IDX"
    attrs: bool = False                # the header is attributes: '"NAME" index="0"'
    render: str = "{name}"             # how the header is written; "{index}" is a call counter
    render_end: str | None = None      # written after it; None: name_end[0] (or nothing)


@dataclass(frozen=True)
class Region:
    begin: tuple[str, ...]             # spellings of the start marker; the first is canonical
    body: str                          # one of BODY_KINDS
    end: tuple[str, ...] = ()          # region end (optional in the text: EOS may close it)
    call_begin: tuple[str, ...] = ()   # calls inside a section start with this
    call_end: tuple[str, ...] = ()
    header: Header | None = None
    params: ParamSyntax | None = None  # for body "xml"
    call_close: str = ""               # consumed by an xml/gemma body: "</function>", "</invoke>"
    after_body: tuple[str, ...] = ()   # optional literals after a body: "```", end-of-args tags
    fence: bool = False                # an optional ```json fence before the body
    optional_prefixes: tuple[str, ...] = ()  # skipped when the body starts with one; the
                                             # renderer and the grammar write the first
    sep: str = ""                      # between bodies in one region (Llama's ";")
    single_key: bool = False           # {"NAME": {args}} objects (Apertus)
    name_keys: tuple[str, ...] = ("name", "tool_name", "function")
    args_keys: tuple[str, ...] = ("arguments", "parameters", "args", "tool_input")
    id_key: str = ""                   # the renderer writes the call's index under this key
    args_required: bool = False        # a call object must have an arguments key (Llama JSON)
    hold_args: bool = False            # json_call: arguments held until their value ends, and
                                       # a call only when they are JSON (Llama 3 JSON)
    list_alt: bool = False             # a JSON list may replace the header+body (pre-v11 Mistral)
    bare_give_back: bool = False       # a region given back as text loses its start marker
                                       # (Mistral's [TOOL_CALLS] is a control token)
    drop_empty_list: bool = False      # json_list: an empty list `[]` is dropped, not text
                                       # (vLLM's Granite engine)
    string_delim: str = ""             # gemma body: the string delimiter
    namespace: str = ""                # nested_xml body: the prefix of every tag
    render_sep: str = ""               # what the renderer writes between calls of one region
    render_args: str = "json"          # json | xml | nested_xml | pythonic | gemma
    known_names: bool = False          # with tools given, a call naming none of them is text
    drop_unknown: bool = False         # with tools given, a call naming none of them is dropped
    json_alt: bool = False             # a region with call_begin may hold one JSON call object
                                       # instead (dots' `<dots_function_call>{"name": ..}`)
    collapse_doubled: bool = False     # `get_weather.get_weather` is the registered
                                       # `get_weather` (Muse's rendering of bare names)
    nameless_calls: bool = False       # `[TOOL_CALLS]{args}` / `[TOOL_CALLS][ARGS]{args}`, right
                                       # after the marker: a call named "" (vLLM's Mistral
                                       # engine, v11 tokenizers; pre-v11 writes a space first)
    strict_ids: bool = False           # Kimi K2: a call whose id lacks `:INDEX` is skipped, and
                                       # an empty section is dropped (as vLLM's parser does)
    drop_cut_off: bool = False         # a region the output cuts off before any call, or
                                       # an empty one, is dropped, not given back as text
                                       # (Kimi K3's XTML; GLM's engine parsers)

    def __post_init__(self) -> None:
        if self.body not in BODY_KINDS:
            raise ValueError(f"unknown body kind {self.body!r}; expected one of {BODY_KINDS}")
        if self.body in ("json_args", "xml", "nested_xml", "gemma") and self.header is None:
            raise ValueError(f"body {self.body!r} needs a header to give the call's name")
        if self.body == "xml" and self.params is None:
            raise ValueError("body 'xml' needs params (a ParamSyntax)")


@dataclass(frozen=True)
class ToolSpec:
    """One ``--tool-call-parser`` name."""

    name: str
    regions: tuple[Region, ...]
    models: str = ""
    extra_markers: tuple[str, ...] = ()  # inner/end markers that may be special tokens
    anchored: tuple[str, ...] = ()  # start markers that count only at the start of the answer
    anchor_after: tuple[str, ...] = ()  # ... or right after one of these in the content
    ends_reasoning: bool = True
    ends_reasoning_at: tuple[str, ...] | None = None  # the start markers that end reasoning
                                                      # implicitly (None: all of them)
    keep_ws: bool = False  # whitespace around a section stays in the content (vLLM's engine
                           # parsers with strip_content_whitespace_with_tools off)
    keep_ws_trim: str = ""  # stripped from the end of that whitespace (ERNIE: its newlines)
    verbatim: bool = False  # text after a section is content as written (leading whitespace too)
    grammar: str = "native"  # "native": structural tag in the format's syntax
    content_drop: tuple[str, ...] = ()  # wrapper markers dropped from content (Kimi K3's
                                        # `<|open|>response<|sep|>`), with or without reasoning
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())
    reasoning: str | None = None  # the reasoning parser used when none is named
    engine: str = ""  # `ToolFormat.engine` (qwen3_coder, qwen3_xml, mimo: "qwen3")
    join: str | None = None  # `ToolFormat.content_join` (Apertus: "\n")
    coerce_args: bool = False  # JSON arguments retyped by the tool's schema (vLLM's engine
                               # parsers with JSON arguments: `"5"` for an integer -> 5)

    def __post_init__(self) -> None:
        stray = [m for m in self.anchored if m not in self.start_markers()]
        if stray:
            raise ValueError(f"{self.name}: anchored markers {stray} are not start markers")

    def start_markers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for r in self.regions for m in r.begin))

    def region_for(self, marker: str) -> Region:
        for r in self.regions:
            if marker in r.begin:
                return r
        raise ValueError(f"{marker!r} is not a start marker of tool format {self.name!r}")

    def special_markers(self) -> tuple[str, ...]:
        out: list[str] = []
        for r in self.regions:
            out += [*r.begin, *r.end, *r.call_begin, *r.call_end, r.call_close, *r.after_body]
            if r.header is not None:
                out += [*r.header.name_end, r.header.skip_to]
            if r.params is not None:
                p = r.params
                out += [p.open, *p.open_alts, p.key_close, p.close, p.value_open]
        return tuple(dict.fromkeys(m for m in (*out, *self.extra_markers) if len(m) > 1))
