"""`CompiledDecode`: the CPU decode step's forward through `torch.compile` (TorchInductor).

On a small model the CPU decode step is bound by per-op dispatch, not arithmetic: eager PyTorch
runs ~40 ops per layer (norms, rotary, the attention's index copies and SDPA, residuals), each
a few microseconds of Python and dispatch. Inductor fuses the elementwise ops into a few C++
loops and calls one Python wrapper per step; on the demo model that halves the forward at batch
1-8 (benchmarks/RESULTS.md, "torch.compile on the CPU decode step").

Scope, like vLLM's compile-before-serving rule: only plain decode steps (one new token per
row) of a native model on CPU with TORCH_SDPA attention, contiguous or paged layout; prefill,
jump-forward steps, the paged kernels and CUDA (which has CUDA graphs) stay eager. Every graph
the decode step needs is compiled by `warm_up` before the engine takes requests: batch 1 and
batch > 1 (PyTorch specializes size 1), batch > 1 also with a ragged-row mask, with the batch
size, the key count, the first row and the block-table width symbolic, so no request triggers
a compile later. `enforce_eager=True` (vLLM's flag: no torch.compile, no CUDA graphs) turns it off. Where
compiling fails (no C++ compiler, an unsupported op), the engine logs why and stays eager.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import Any

import torch
from thinkgate.engine.kv.kv_cache import AttentionMetadata, build_attention_metadata

log = logging.getLogger("thinkgate.engine")

# (batch, keys per row, first row) run at warm-up: two values of each per graph, so every int
# that varies between steps (batch size, key count, first row) is traced as a symbol
_WARM_SHAPES = ((1, 3, 0), (1, 4, 1), (2, 5, 0), (3, 6, 1))

# Inductor options for the CPU step graphs. `cpp_wrapper`: the code that calls the graph's
# kernels (allocations, size checks, the matmul and SDPA calls, ~60 per step) is C++ instead of
# Python; the same kernels run. Demo model, batch 32 greedy, one thread: +1.5-4.6% tokens/s in
# alternating A/B runs (benchmarks/RESULTS.md, "Run 8")
INDUCTOR_OPTIONS = {"cpp_wrapper": True}


def compile_now(what: str, compile_all: Callable[[], None]) -> float | None:
    """Run `compile_all` (warm-up calls that compile every graph of `what`): its seconds, or
    None when compiling failed (logged; the caller then runs eagerly)."""
    start = time.perf_counter()
    try:
        compile_all()
    except Exception as exc:  # noqa: BLE001 - any compile failure means "run eagerly"
        log.warning("torch.compile of the %s failed (%s: %s); running eagerly", what,
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return None
    seconds = time.perf_counter() - start
    log.info("%s compiled with torch.compile in %.1f s", what, seconds)
    return seconds


def compiler_available() -> bool:
    """Inductor's CPU backend needs a C++ compiler on the PATH."""
    return any(shutil.which(name) for name in ("g++", "c++", "clang++"))


class CompiledDecode:
    """`forward(input_ids, positions, meta, kv_layers)` of the model, compiled; `warm_up` first."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.compiled: Any = torch.compile(model.forward, dynamic=True, fullgraph=True,
                                            options=INDUCTOR_OPTIONS)
        self.ready = False
        self.compile_seconds = 0.0

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor,
                 meta: AttentionMetadata, kv_layers: list[tuple[torch.Tensor, torch.Tensor]]
                 ) -> torch.Tensor:
        return self.compiled(input_ids, positions, meta, kv_layers)

    @torch.inference_mode()
    def warm_up(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
                scratch_block: int, max_batch: int, max_keys: int, paged: bool) -> bool:
        """Compile every decode graph now. K/V writes go to the scratch block or row (never
        read); reads cover rows [0, batch) or the scratch block, whose contents do not matter.
        Contiguous layout: a "block" is a whole row. False (and eager from then on) when
        compiling fails."""
        seconds = compile_now("decode step", lambda: self._run_warm_shapes(
            kv_layers, block_size, scratch_block, max_batch, max_keys, paged))
        if seconds is None:
            return False
        self.compile_seconds, self.ready = seconds, True
        return True

    def _run_warm_shapes(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                         block_size: int, scratch_block: int, max_batch: int, max_keys: int,
                         paged: bool) -> None:
        device = kv_layers[0][0].device
        for ragged in (False, True):
            for index, (batch, keys, first) in enumerate(_WARM_SHAPES):
                if paged:  # 2 or 3 blocks of keys; tables one block wider, as the runner pads
                    keys, first = (1 + index % 2) * block_size + 1, 0
                if first + batch > max_batch or keys >= max_keys or (ragged and batch == 1):
                    continue  # one row is never ragged
                lens = [keys] * batch
                if ragged:
                    lens[0] = keys - 1  # rows of unequal length: the masked graph
                positions = torch.tensor([[n - 1] for n in lens], device=device)
                slots = torch.full((batch,), scratch_block * block_size, device=device)
                tables = None
                if paged:
                    width = -(-keys // block_size) + 1
                    tables = torch.full((batch, width), scratch_block, device=device)
                meta = build_attention_metadata(positions, slots, tables, lens, False, first)
                ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
                if batch > 1:  # dynamic from the first compile (size 1 is specialized)
                    for tensor in (ids, positions, slots, meta.attn_mask, tables):
                        if tensor is not None:
                            torch._dynamo.mark_dynamic(tensor, 0)
                if tables is not None:
                    torch._dynamo.mark_dynamic(tables, 1)
                if meta.attn_mask is not None:
                    torch._dynamo.mark_dynamic(meta.attn_mask, 3)
                self.compiled(ids, positions, meta, kv_layers)
