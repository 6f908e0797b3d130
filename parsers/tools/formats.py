"""Registers every tool format declared as data in ``formats_json.py`` / ``formats_xml.py``."""

from __future__ import annotations

from thinkgate.parsers.registry import register_tool_parser

from .formats_json import SPECS as _JSON_SPECS
from .formats_xml import SPECS as _XML_SPECS
from .k2_horizon import K2HorizonFormat
from .lfm2 import Lfm2Format
from .minicpm5 import MiniCPM5Format
from .poolside import PoolsideFormat
from .pythonic_held import HeldPythonicFormat
from .spec import ToolSpec
from .suffixed import suffixed_factory
from .tool_format import SpecToolFormat

TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in (*_JSON_SPECS, *_XML_SPECS)}

# specs whose reading is not the shared one
_FORMAT_CLASSES = {"k2_horizon": K2HorizonFormat, "minicpm5": MiniCPM5Format,
                   "poolside_v1": PoolsideFormat, "lfm2": Lfm2Format,
                   **dict.fromkeys(("pythonic", "llama4_pythonic", "olmo3"), HeldPythonicFormat)}

for _name, _spec in TOOL_SPECS.items():
    register_tool_parser(_name)(_FORMAT_CLASSES.get(_name, SpecToolFormat)(_spec))
# Hunyuan 4 checkpoints may suffix their tags (`<tool_calls:opensource>`): read from the vocabulary
register_tool_parser("hy_v4")(suffixed_factory(TOOL_SPECS["hy_v4"]))

