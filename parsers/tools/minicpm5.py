"""MiniCPM 5's `<function name="..."><param name="...">V</param></function>` calls, read whole and
checked against the request's tools, as vLLM's parser does.

Each `<function ...>` block is held until its `</function>`, then read as XML (entities decoded,
CDATA unwrapped, values as written) or, where it is not well-formed XML, by the tag pattern
(values stripped unless CDATA). The block is a call only when it names a tool of the request,
every `<param>` has a name, no name repeats, and every `required` parameter is there; otherwise
it is content as written (vLLM's parse returns the output as written when no call is read),
and so is a block the output cuts off before `</function>`. A
`properties` / `arguments` parameter the schema does not declare, holding an object with at
least one declared key, is unwrapped into the call's arguments. Values are typed as vLLM types
them: kept as text for a `string` property, else read as JSON or a Python literal when they are
one. Unlike vLLM, a parameter the schema does not declare is passed on (parsers/README.md,
"Deliberate differences"), and so is a call when the request gives no tools. The tokenizer's
space markers (`Ġ` for a space, `Ċ` for a newline) and collapsed tags (`<functionname=`,
`<paramname=`) inside a block are read as vLLM normalises them. Holding costs one read of the
block at its end marker; per-delta work stays O(len(delta)).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
import xml.etree.ElementTree as ET
from typing import Any

from thinkgate.parsers.types import (
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolSection,
    ToolStart,
)

from .convert import tool_parameters
from .held_block import HeldBlockSection
from .tool_format import SpecToolFormat

CLOSE = "</function>"
WRAPPERS = ("properties", "arguments")
_SPACES = str.maketrans({"\u0120": " ", "\u010a": "\n"})
_NAME = re.compile(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>")
_PARAM = re.compile(r"<param\s+name=['\"]([^'\"]+)['\"]>(.*?)</param>", re.S)
_NAMELESS = re.compile(r"<param(?![^>]*\bname=)[^>]*>", re.S)


class Invalid(Exception):
    """The block breaks the format or the tool's schema: it stays content."""


def normalise(text: str) -> str:
    text = text.translate(_SPACES)
    return text.replace("<functionname=", "<function name=").replace("<paramname=",
                                                                     "<param name=")


def typed_value(value: Any, schema: dict | None) -> Any:
    """A raw value typed as vLLM's MiniCPM 5 parser types it."""
    if (schema or {}).get("type") == "string":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(value)
    except Exception:  # noqa: BLE001 - any text that is not a literal stays text
        return value


class _Arguments:
    def __init__(self, params: dict | None) -> None:
        props = (params or {}).get("properties")
        self.props: dict = props if isinstance(props, dict) else {}
        self.args: dict[str, Any] = {}

    def _put(self, key: str, value: Any) -> None:
        if key in self.args:
            raise Invalid(f"parameter {key!r} given twice")
        schema = self.props.get(key)
        self.args[key] = typed_value(value, schema if isinstance(schema, dict) else None)

    def add(self, key: str | None, raw: str) -> None:
        if not key:
            raise Invalid("a <param> without a name")
        if key in WRAPPERS and self.props and key not in self.props:
            inner = typed_value(raw, None)
            if not isinstance(inner, dict) or not any(k in self.props for k in inner):
                raise Invalid(f"{key!r} wraps no argument of the tool")
            for k, v in inner.items():
                self._put(str(k), v)
            return
        self._put(key, raw)


def _read_xml(block: str, params_of: Any) -> tuple[str, dict[str, Any]]:
    root = ET.fromstring(block)  # raises ET.ParseError where it is not well-formed
    name = (root.attrib.get("name") or "").strip()
    if root.tag != "function" or not name:
        raise ET.ParseError("no function name")
    nodes = root.findall("param")
    wrapper = root.find("arguments")
    if not nodes and wrapper is not None:
        nodes = wrapper.findall("param")
    out = _Arguments(params_of(name))
    for node in nodes:
        out.add(node.attrib.get("name"), node.text or "")
    return name, out.args


def _read_tags(block: str, params_of: Any) -> tuple[str, dict[str, Any]]:
    m = _NAME.search(block)
    name = (m.group(1) if m else "").strip()
    if not name:
        raise Invalid("no function name")
    if _NAMELESS.search(block):
        raise Invalid("a <param> without a name")
    out = _Arguments(params_of(name))
    for p in _PARAM.finditer(block):
        raw = p.group(2)
        if raw.startswith("<![CDATA[") and raw.endswith("]]>"):
            raw = raw[9:-3]
        else:
            raw = raw.strip()
        out.add(p.group(1).strip(), raw)
    return name, out.args


def read_block(block: str, tools: list | None) -> tuple[str, dict[str, Any]] | None:
    """The call one whole (normalised) `<function ...>...</function>` block makes, or None."""
    def params_of(name: str) -> dict | None:
        return tool_parameters(tools, name)
    try:
        try:
            name, args = _read_xml(block, params_of)
        except ET.ParseError:
            name, args = _read_tags(block, params_of)
    except (Invalid, RecursionError):
        return None
    if not tools:
        return name, args
    names = {t.get("function", t).get("name") for t in tools if isinstance(t, dict)}
    if name not in names:
        return None
    required = (params_of(name) or {}).get("required") or ()
    if isinstance(required, list) and not all(k in args for k in required if isinstance(k, str)):
        return None
    return name, args


class MiniCPM5Section(HeldBlockSection):
    def __init__(self, marker: str, ctx: ToolContext) -> None:
        super().__init__(marker, CLOSE)
        self.tools = ctx.tools

    def read(self, body: str) -> list[Event] | None:
        call = read_block("<function name=" + normalise(body) + CLOSE, self.tools)
        if call is None:
            return None
        name, args = call
        return [ToolStart(name), ToolArgs(json.dumps(args, ensure_ascii=False)), ToolEnd()]


class MiniCPM5Format(SpecToolFormat):
    """The spec (markers, grammar, renderer) of MiniCPM 5; parsing by `MiniCPM5Section`."""

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return MiniCPM5Section(marker, ctx)
