"""``hf`` and ``beam``: the tool syntax is read from the model's own files.

vLLM 0.33 reads these names from the checkpoint's ``response_template`` metadata; when that dict
has a ``tool_calls`` field whose ``open`` is a literal, the known format that starts with it is
the format. Otherwise the chat template (and a ``response_template``/``response_schema``, if
present) is searched for the start markers of the known formats; the most specific match wins
(longest marker). With nothing recognisable the format is Hermes-style ``<tool_call>`` JSON, the
syntax most HF chat templates use.
"""

from __future__ import annotations

import json
from typing import Any

from thinkgate.parsers.registry import register_tool_parser

from .formats import TOOL_SPECS
from .spec import ToolSpec
from .tool_format import SpecToolFormat

_DEFAULT = "qwen3_json"
# A marker that only appears in templates as punctuation ("[", "{") says nothing.
_MIN_MARKER = 6


def template_text(tokenizer: Any) -> str:
    parts: list[str] = []
    for attr in ("chat_template", "response_template", "response_schema"):
        value = getattr(tokenizer, attr, None)
        if value:
            parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    init = getattr(tokenizer, "init_kwargs", None) or {}
    for key in ("chat_template", "response_template", "response_schema"):
        if init.get(key):
            value = init[key]
            parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return "\n".join(parts)


def spec_from_template(text: str) -> ToolSpec:
    """The known format whose longest start marker appears in ``text`` (default: Hermes)."""
    return _best_spec(text) or TOOL_SPECS[_DEFAULT]


def _best_spec(text: str) -> ToolSpec | None:
    best: tuple[int, bool, str] | None = None
    for name, spec in TOOL_SPECS.items():
        for marker in spec.start_markers():
            if len(marker) >= _MIN_MARKER and marker in text:
                # ties go to the format whose canonical marker it is ([TOOL_CALLS]: mistral)
                key = (len(marker), marker == spec.regions[0].begin[0], name)
                if best is None or key[:2] > best[:2]:
                    best = key
    return TOOL_SPECS[best[2]] if best else None


def tool_call_openers(tokenizer: Any) -> str:
    """The literal ``open`` of the ``tool_calls`` field of a ``response_template`` dict ("" if
    none), joined by newlines."""
    init = getattr(tokenizer, "init_kwargs", None) or {}
    template = getattr(tokenizer, "response_template", None) or init.get("response_template")
    fields = template.get("fields") if isinstance(template, dict) else None
    field = fields.get("tool_calls") if isinstance(fields, dict) else None
    raw = field.get("open") if isinstance(field, dict) else None
    return "\n".join(x for x in ([raw] if isinstance(raw, str) else raw or ()) if isinstance(x, str))


def from_model_files(tokenizer: Any) -> SpecToolFormat:
    spec = _best_spec(tool_call_openers(tokenizer))
    if spec is not None:
        return SpecToolFormat(spec)
    return SpecToolFormat(spec_from_template(template_text(tokenizer)))


register_tool_parser("hf")(from_model_files)
register_tool_parser("beam")(from_model_files)
