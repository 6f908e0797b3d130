"""Registers every tool format declared as data in ``formats_json.py`` / ``formats_xml.py``."""

from __future__ import annotations

from thinkgate.parsers.registry import register_tool_parser

from .formats_json import SPECS as _JSON_SPECS
from .formats_xml import SPECS as _XML_SPECS
from .spec import ToolSpec
from .tool_format import SpecToolFormat

TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in (*_JSON_SPECS, *_XML_SPECS)}

for _name, _spec in TOOL_SPECS.items():
    register_tool_parser(_name)(SpecToolFormat(_spec))

