"""Tool-call formats; names resolve lazily through this table (name -> module that registers it).

Owned by the tool-parser work (issue 5): add a row per name, a module per family.
"""

from __future__ import annotations

TOOL_MODULES: dict[str, str] = {
    "hermes": "thinkgate.parsers.tools.hermes",
    "qwen3_json": "thinkgate.parsers.tools.hermes",
}
