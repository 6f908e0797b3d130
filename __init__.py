"""thinkgate: a constrained-decoding LLM engine.

`import thinkgate` stays light: the engine, Triton and the server are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "LLM": "thinkgate.api.llm",
    "SamplingParams": "thinkgate.engine.sampling_params",
    "StructuredOutputsParams": "thinkgate.engine.sampling_params",
    "RequestOutput": "thinkgate.engine.outputs",
    "CompletionOutput": "thinkgate.engine.outputs",
}

__all__ = [
    "__version__",
    "LLM",
    "SamplingParams",
    "StructuredOutputsParams",
    "RequestOutput",
    "CompletionOutput",
]

if TYPE_CHECKING:  # pragma: no cover
    from thinkgate.api.llm import LLM
    from thinkgate.engine.outputs import CompletionOutput, RequestOutput
    from thinkgate.engine.sampling_params import SamplingParams, StructuredOutputsParams


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'thinkgate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
