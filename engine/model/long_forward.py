"""How a long eager forward (a prompt's prefill) runs on CPU: on every core, and through
oneDNN's faster fp32 matmul path where that path keeps fp32 accuracy on this CPU.

A forward of `PREFILL_TOKENS` or more new tokens is arithmetic (matmuls, attention), unlike a
decode step, which is dispatch-bound. Two things speed it up without changing what it computes:

- **Every core.** An engine core serving a small model steps on one thread and leaves a core to
  the API process (engine_core.default_core_threads): right for decode, but during a long
  prefill the API process has nothing to do.
- **oneDNN's "bf16" fp32 precision** (`torch.backends.mkldnn.matmul.fp32_precision`). On this
  project's CPUs (AVX512-BF16, no AMX) it runs fp32 matmuls and the CPU flash attention ~1.5-2.5x
  faster at fp32 accuracy (max error 2-4x that of the default path, ~1e-6 of the output's
  scale, where a bf16 model is ~1e-2 off). A CPU whose oneDNN truly rounds to bf16 under this
  mode would lose accuracy, so it is used only where `fast_fp32_keeps_accuracy` measures that
  it does not. Decode steps keep the default path: at a few rows it is slower.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

# A forward this long is compute-bound for a while: the API process is idle, waiting for it
PREFILL_TOKENS = 256
# the largest error, relative to the output's largest value, that still counts as fp32: the
# default path is at ~5e-7 and the fast one at ~2e-6 here; bf16 rounding is at ~5e-3
FP32_TOLERANCE = 1e-4


def _precision_knob() -> object | None:
    matmul = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    if matmul is None or not hasattr(matmul, "fp32_precision"):
        return None
    return matmul


@functools.cache
def fast_fp32_keeps_accuracy() -> bool:
    """Whether fp32 matmuls under oneDNN's "bf16" precision stay within `FP32_TOLERANCE` on
    this CPU (measured once a process, on a 256x576 @ 576x512 product against float64)."""
    knob = _precision_knob()
    if knob is None or not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 576, generator=gen)
    w = torch.randn(512, 576, generator=gen)
    exact = x.double() @ w.double().t()
    with fast_fp32(True):
        got = torch.nn.functional.linear(x, w).double()
    return bool((got - exact).abs().max() <= FP32_TOLERANCE * exact.abs().max())


@contextmanager
def fast_fp32(enabled: bool) -> Iterator[None]:
    """oneDNN's "bf16" fp32 precision inside the block (when `enabled`), the previous after."""
    knob = _precision_knob()
    if not enabled or knob is None:
        yield
        return
    before = knob.fp32_precision  # type: ignore[attr-defined]
    knob.fp32_precision = "bf16"  # type: ignore[attr-defined]
    try:
        yield
    finally:
        knob.fp32_precision = before  # type: ignore[attr-defined]


def wide_forward(run: Callable[..., torch.Tensor], threads: int | None, fast: bool,
                 *args: object) -> torch.Tensor:
    """`run(*args)` on `threads` torch threads (None: the steady count) and, when `fast`,
    oneDNN's fast fp32 path; then back to the steady state. A 1,700-token prompt on the demo
    model: ~90 ms on one thread, ~50 on two, ~39 on two with the fast path. Compiled steps keep
    their own thread count (their code is specialized to it), so only eager forwards widen."""
    steady = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with fast_fp32(fast):
            return run(*args)
    finally:
        torch.set_num_threads(steady)
