"""Grammars for plugin tool parsers (``--tool-parser-plugin``): a plugin registering a
``SpecToolFormat`` gets its grammar from that spec; a hand-written format gets a clear error."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from thinkgate.parsers import get_parser, load_plugin
from thinkgate.parsers.tools.grammar import render_calls, tool_call_structural_tag

PLUGIN = """
from thinkgate.parsers import ToolFormat, ToolSection, get_tool_format, register_tool_parser
from thinkgate.parsers.tools.spec import Region, ToolSpec
from thinkgate.parsers.tools.tool_format import SpecToolFormat

register_tool_parser("plugin_calls")(get_tool_format("hermes"))
register_tool_parser("plugin_spec_calls")(SpecToolFormat(ToolSpec(
    "plugin_spec_calls", (Region(("<<call>>",), "json_call", end=("<</call>>",)),))))


class HandSection(ToolSection):
    def feed(self, text):
        return [], None

    def finish(self):
        return []


@register_tool_parser("plugin_hand_calls")
class HandFormat(ToolFormat):
    start_markers = ("<hand>",)

    def open_section(self, marker, ctx):
        return HandSection()
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}}]
CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("ping", {})]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("plugin") / "grammar_plugin.py"
    path.write_text(PLUGIN)
    return load_plugin(path)


def accepts(tag: dict, text: str) -> bool:
    grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
    return xgr.testing._is_grammar_accept_string(grammar, text)


@pytest.mark.parametrize("name", ["plugin_calls", "plugin_spec_calls"])
def test_spec_plugin_gets_its_grammar(plugin: list[str], name: str) -> None:
    assert f"tool:{name}" in plugin
    text = render_calls(name, CALLS)
    one = render_calls(name, CALLS[:1])
    assert accepts(tool_call_structural_tag(name, TOOLS, "required"), text)
    named = tool_call_structural_tag(name, TOOLS, NAMED)
    assert accepts(named, one) and not accepts(named, text)
    assert not accepts(tool_call_structural_tag(name, TOOLS, "required"), "plain text")
    m = get_parser(tool_parser=name).parse(text, tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == CALLS


def test_plugin_grammar_is_the_plugin_syntax(plugin: list[str]) -> None:
    assert render_calls("plugin_spec_calls", CALLS[:1]).startswith("<<call>>")
    tag = tool_call_structural_tag("plugin_spec_calls", TOOLS, "required")
    assert not accepts(tag, render_calls("hermes", CALLS[:1]))


def test_hand_written_plugin_has_no_grammar(plugin: list[str]) -> None:
    for choice in ("required", NAMED, "auto"):
        with pytest.raises(ValueError, match=r"'plugin_hand_calls' \(HandFormat\).*ToolSpec"):
            tool_call_structural_tag("plugin_hand_calls", TOOLS, choice)
    assert tool_call_structural_tag("plugin_hand_calls", TOOLS, "none") is None
