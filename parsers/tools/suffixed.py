"""Hunyuan 4's per-checkpoint tag suffix: `<tool_calls:opensource>` for `<tool_calls>`.

A Hunyuan 4 checkpoint may spell its structural tokens with a suffix (`<think:6124c78e>`,
`<tool_call:6124c78e>`, ...); vLLM's hy_v4 parsers read it from the vocabulary (the first
`<think|tool_calls|tool_call|arg_key|arg_value[:suffix]>` token found). `hy_v4_format(tokenizer)`
does the same and returns the hy_v4 tool format with every such tag suffixed.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from typing import Any

from .spec import ToolSpec
from .tool_format import SpecToolFormat

_TAGS = "think|tool_calls|tool_call|arg_key|arg_value"
_TOKEN = re.compile(rf"<(?:{_TAGS})(:[^\s>]+)?>")
_TAG = re.compile(rf"(</?(?:{_TAGS}))(?=[>\s]|$)")


def token_suffix(tokenizer: Any) -> str:
    """The suffix (with its colon) the tokenizer's structural tokens carry, or ""."""
    vocab = getattr(tokenizer, "get_vocab", None)
    if vocab is None:
        return ""
    for token in vocab():
        m = _TOKEN.fullmatch(token)
        if m:
            return m.group(1) or ""
    return ""


def _suffixed(obj: Any, suffix: str) -> Any:
    if isinstance(obj, str):
        return _TAG.sub(lambda m: m.group(1) + suffix, obj)
    if isinstance(obj, tuple):
        return tuple(_suffixed(x, suffix) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{
            f.name: _suffixed(getattr(obj, f.name), suffix) for f in dataclasses.fields(obj)
            if f.init and f.name not in ("name", "models", "notes", "body", "render_args")})
    return obj


@cache
def _format(spec: ToolSpec, suffix: str) -> SpecToolFormat:
    return SpecToolFormat(_suffixed(spec, suffix) if suffix else spec)


def suffixed_factory(spec: ToolSpec) -> Any:
    """A registry factory: the spec's format with the tokenizer's tag suffix."""
    return lambda tokenizer: _format(spec, token_suffix(tokenizer))
