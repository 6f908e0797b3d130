"""Parser registries by vLLM CLI name, resolved lazily, and the plugin loader.

A name maps to a module (`reasoning.REASONING_MODULES`, `tools.TOOL_MODULES`) imported on first
use; importing it runs its `register_*_parser` calls. A registered object is a `ReasoningFormat` /
`ToolFormat` instance, or a callable taking `tokenizer` that returns one (a `ToolFormat`
subclass qualifies), for formats read from the model's own files (`hf`, `beam`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from thinkgate.parsers.reasoning_format import ReasoningFormat
from thinkgate.parsers.types import ToolFormat

T = TypeVar("T")

_REASONING: dict[str, Any] = {}
_TOOLS: dict[str, Any] = {}


def register_reasoning_parser(name: str) -> Callable[[T], T]:
    """Decorator (or call) registering a reasoning format, or a factory(tokenizer), as `name`."""
    return _register(_REASONING, name)


def register_tool_parser(name: str) -> Callable[[T], T]:
    """Decorator (or call) registering a tool format class/instance/factory as `name`."""
    return _register(_TOOLS, name)


def _register(table: dict[str, Any], name: str) -> Callable[[T], T]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"parser name must be a non-empty string, got {name!r}")

    def deco(obj: T) -> T:
        table[name] = obj
        return obj

    return deco


def _modules(kind: str) -> dict[str, str]:
    if kind == "reasoning":
        from thinkgate.parsers.reasoning import REASONING_MODULES

        return REASONING_MODULES
    from thinkgate.parsers.tools import TOOL_MODULES

    return TOOL_MODULES


def _resolve(kind: str, table: dict[str, Any], name: str) -> Any:
    if name not in table and name not in _modules(kind):
        from thinkgate.parsers.aliases import REASONING_ALIASES, TOOL_ALIASES

        name = (REASONING_ALIASES if kind == "reasoning" else TOOL_ALIASES).get(name, name)
    if name not in table:
        module = _modules(kind).get(name)
        if module is not None:
            importlib.import_module(module)
    if name not in table:
        known = ", ".join(sorted(set(table) | set(_modules(kind))))
        raise ValueError(f"unknown {kind} parser {name!r}; known: {known}")
    return table[name]


def get_reasoning_format(name: str, tokenizer: Any = None) -> ReasoningFormat:
    obj = _resolve("reasoning", _REASONING, name)
    fmt = obj if isinstance(obj, ReasoningFormat) else obj(tokenizer)
    if not isinstance(fmt, ReasoningFormat):
        raise TypeError(f"reasoning parser {name!r} gave {type(fmt).__name__}, "
                        "not a ReasoningFormat")
    return fmt


def get_tool_format(name: str, tokenizer: Any = None) -> ToolFormat:
    obj = _resolve("tool", _TOOLS, name)
    fmt = obj if isinstance(obj, ToolFormat) else obj(tokenizer)
    if not isinstance(fmt, ToolFormat):
        raise TypeError(f"tool parser {name!r} gave {type(fmt).__name__}, not a ToolFormat")
    return fmt


def list_parsers() -> dict[str, list[str]]:
    return {
        "tool": sorted(set(_TOOLS) | set(_modules("tool"))),
        "reasoning": sorted(set(_REASONING) | set(_modules("reasoning"))),
    }


def load_plugin(path: str | Path) -> list[str]:
    """Run a Python file that registers parsers (`--reasoning-parser-plugin`,
    `--tool-parser-plugin`); return the names it added, as `tool:NAME` / `reasoning:NAME`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"parser plugin {str(path)!r} is not a file")
    before = {("tool", n) for n in _TOOLS} | {("reasoning", n) for n in _REASONING}
    mod_name = f"thinkgate_parser_plugin_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"parser plugin {str(path)!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    after = {("tool", n) for n in _TOOLS} | {("reasoning", n) for n in _REASONING}
    return sorted(f"{k}:{n}" for k, n in after - before)
