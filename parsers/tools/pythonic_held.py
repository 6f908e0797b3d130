"""Pythonic call lists read whole, as vLLM 0.33's pythonic, llama4_pythonic and olmo3 parsers
read them: the list is Python (`ast`), every call a name with keyword arguments whose values are
literals JSON can hold, or the whole block is text.

vLLM decides only once the output is complete, so a list that turns out malformed
(`[f(a='x 'y')]`, `[bad(x=b'z'), ok()]`, `[foo(x=1])]`) or cut off stays content as written,
and a repair that guesses what the model meant is never made. To give the same result streamed,
the block is held: `[`-lists (pythonic, llama4_pythonic) to the end of the output, since text
after the list makes the whole output text in vLLM; olmo3's `<function_calls>` block to its end
marker (`HeldBlockSection`). Per-delta work is an append; the block is parsed once, at its end.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from typing import Any

from thinkgate.parsers.types import (
    Content,
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolSection,
    ToolStart,
)

from .held_block import HeldBlockSection
from .tool_format import SpecToolFormat

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
# what vLLM's pattern needs before it hands the text to `ast`: `[`, a plain name, `(`, then
# `)` or a keyword (`name=`)
_HEAD = re.compile(r"\[[A-Za-z]+\w*\((?:\s*\)|[A-Za-z]+\w*=)")
_JSON_NAMES = {"null": None, "true": True, "false": False}


class _NotJson(ValueError):
    pass


def _value(node: ast.expr, src: str) -> Any:
    """A keyword's value as JSON (vLLM's reading of literals); a number JSON cannot hold keeps
    the text written (README: "a number JSON cannot hold")."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, float) and not math.isfinite(v):
            return ast.get_source_segment(src, node) or repr(v)
        if v is None or isinstance(v, (str, int, float)):
            return v  # bool is an int
        raise _NotJson(repr(v))
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotJson("dict key")
        return {k.value: _value(v, src) for k, v in zip(node.keys, node.values)}  # type: ignore[union-attr]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_value(v, src) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, src)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(v, str) and isinstance(node.op, ast.USub):  # -1e999, kept as written
            return "-" + v
    raise _NotJson(type(node).__name__)


def _name(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise _NotJson("call name")
    return ".".join([node.id, *reversed(parts)])


def read_call_list(src: str) -> list[tuple[str, str]] | None:
    """`[f(a=1), g()]` -> [(name, arguments JSON)], or None when vLLM keeps `src` as text."""
    if not _HEAD.match(src):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in strings: kept, as Python does
            module = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    first = module.body[0] if module.body else None
    listed = getattr(first, "value", None)
    if not isinstance(listed, ast.List) or not all(isinstance(e, ast.Call) for e in listed.elts):
        return None
    calls = []
    try:
        for call in listed.elts:
            assert isinstance(call, ast.Call)
            args = {kw.arg: _value(kw.value, src) for kw in call.keywords}
            calls.append((_name(call.func), json.dumps(args, ensure_ascii=False)))
    except (_NotJson, RecursionError, TypeError):
        return None
    return calls


def _events(calls: list[tuple[str, str]]) -> list[Event]:
    out: list[Event] = []
    for name, args in calls:
        out += [ToolStart(name), ToolArgs(args), ToolEnd()]
    return out


class WholeListSection(ToolSection):
    """A `[` list (or `<|python_start|>`) that opens the answer: held to the output's end."""

    def __init__(self, marker: str) -> None:
        self.held = [marker]

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        self.held.append(text)
        return [], None

    def finish(self) -> list[Event]:
        raw = "".join(self.held)
        src = raw
        if src.startswith(PYTHON_START):
            src = src[len(PYTHON_START):].replace(PYTHON_END, "")
        calls = read_call_list(src)
        return [Content(raw)] if calls is None else _events(calls)


def read_call_lines(body: str) -> list[tuple[str, str]] | None:
    """olmo3's block: one call per line, read as vLLM does (the lines joined into a list); a
    call whose value spans lines (JSON whitespace, which the grammar allows) is read as Python
    reads the block, one call per statement (README: "olmo3 call written over several lines")."""
    lines = [line.strip() for line in body.strip().splitlines() if line.strip()]
    calls = read_call_list("[" + ", ".join(lines) + "]")
    if calls is None and len(lines) > 1:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = ast.parse(body.strip())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if module.body and all(isinstance(s, ast.Expr) for s in module.body):
            src = body.strip()
            joined = ", ".join(ast.get_source_segment(src, s) or "" for s in module.body)
            calls = read_call_list("[" + joined + "]")
    return calls


class FunctionCallsSection(HeldBlockSection):
    """olmo3's `<function_calls>` block."""

    def read(self, body: str) -> list[Event] | None:
        calls = read_call_lines(body)
        return None if calls is None else _events(calls)


class HeldPythonicFormat(SpecToolFormat):
    """pythonic / llama4_pythonic / olmo3: markers, grammar and renderer from the spec; the
    block read whole."""

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        region = self.spec.region_for(marker)
        if region.end and marker != PYTHON_START:
            return FunctionCallsSection(marker, region.end[0])
        return WholeListSection(marker)
