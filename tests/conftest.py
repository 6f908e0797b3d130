"""Shared test configuration: the `gpu` and `slow` markers; engines eager unless a test asks.

Every engine the suite builds would otherwise compile its decode step with torch.compile
before its first request (engine/model/compiled_decode.py: 10-100 s each here); the suite sets
`THINKGATE_ENFORCE_EAGER=1` (servers it starts inherit it), and the tests of the compiled path
(tests/engine/test_compiled_decode.py, tests/api/test_compiled_server.py) pass
`enforce_eager=False` or clear the variable.

Engines a module built are freed when the module ends: an engine sits in reference cycles
(its threads' closures, the model's hooks), which Python's cycle collector reaches only after
enough new objects, not enough bytes, so each one's KV cache and weights (0.5-1 GB) stayed
until a full collection: `tests/engine` alone grew to 13-15 GB in one process.

End-to-end decoding in tests/engine and tests/constrained samples through the kernels' torch
twins even under `make test`'s TRITON_INTERPRET=1: the interpreter makes each step ~10x slower
(tests/engine: 137 -> 101 s at load 7), and tests/kernels compares every Triton kernel with its
twin. A test or module marked `triton_path` keeps the caller's setting, so the engine's Triton
path (interpreted) is still decoded end to end there; tests that set the variable themselves
(tests/engine/test_generate.py's two paths) do so after this.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("THINKGATE_ENFORCE_EAGER", "1")
_TWIN_FOLDERS = {"engine", "constrained"}


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module", autouse=True)
def free_module_engines() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def torch_twin_sampling(request: pytest.FixtureRequest,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if request.path.parent.name in _TWIN_FOLDERS \
            and request.node.get_closest_marker("triton_path") is None:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
