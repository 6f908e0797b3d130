"""thinkgate: a constrained-decoding LLM engine.

`import thinkgate` stays light: the engine, Triton and the server are imported on first use.

The checkout's root is this package, so its folders (kernels/, engine/, api/, parsers/,
benchmarks/, tests/) must never be found as top-level modules: `import kernels` anywhere in the
process (transformers imports Hugging Face's `kernels` package) has to get the third-party one.
Python puts the current folder first on `sys.path` for `python -m ...` and `python -c ...`,
multiprocessing's spawned children copy that path, and Ray adds the driver's folder to every
worker's path; so importing `thinkgate` drops every `sys.path` entry that is this folder, in
whatever process and however it was started. This is the one place that rule lives; the test
suite runs pytest in `importlib` mode so that tests/ is not put on the path either
(pyproject.toml), and tests/test_import_root.py checks both.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

_ROOT = os.path.dirname(os.path.abspath(__file__))


def _is_root(entry: str) -> bool:
    try:
        return os.path.samefile(entry or os.curdir, _ROOT)
    except (OSError, TypeError):
        return False


sys.path[:] = [entry for entry in sys.path if not _is_root(entry)]

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
