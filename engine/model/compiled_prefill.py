"""`CompiledPrefill`: masked prefill steps of the CPU contiguous layout through `torch.compile`.

A request whose prompt starts with a cached prefix computes only its last few tokens, attending
over every cached key: a prefill of T new tokens with a (B, 1, T, keys) mask. On the demo model
such a step is as bound by per-op dispatch as a decode step (eager: ~40 ops per layer, a few
microseconds each, around attention and matmuls that cost little at T = 26), so Inductor's
fused version of the same forward pays the same way: the 26 new tokens of the repeated-prefix
benchmark over 1,258 keys, 5.3 -> 3.9 ms of CPU per step on one thread (benchmarks/RESULTS.md,
"Issue 17, repeated-prefix latency").

Scope: steps that attend through a mask with more than one new token per row (a prefill over
a cached prefix, a batch of prompts of unequal length, a jump-forward step), contiguous layout,
CPU, native model, TORCH_SDPA attention; fresh equal-length prefills (plain causal attention)
and the paged layout stay eager, but for one case: one row's fresh prefill of `PREFILL_TOKENS`
or more (a long new prompt, the first token's latency) runs its own graph (`fresh`, compiled
at the thread count long prefills use). `warm_up` compiles both graphs the step needs (one row, and
several, since PyTorch specializes size 1) with the row count, new-token count, key count and
first row symbolic, before the engine takes requests, so no request compiles. Off with
`enforce_eager`, like the compiled decode step (compiled_decode.py), and eager wherever
compiling fails.
"""

from __future__ import annotations

from typing import Any

import torch
from thinkgate.engine.kv.kv_cache import AttentionMetadata, build_attention_metadata
from thinkgate.engine.model.compiled_decode import INDUCTOR_OPTIONS, compile_now
from thinkgate.engine.model.long_forward import PREFILL_TOKENS, fast_fp32

# (rows, new tokens per row, keys of the longest row, first row): two shapes per graph, so every
# int that varies between steps is traced as a symbol
_WARM_SHAPES = ((1, 2, 5, 0), (1, 3, 7, 1), (2, 2, 6, 0), (3, 4, 9, 1))


class CompiledPrefill:
    """`forward(input_ids, positions, meta, kv_layers)` of the model for masked prefill steps."""

    def __init__(self, model: torch.nn.Module) -> None:
        def prefill_forward(input_ids: torch.Tensor, positions: torch.Tensor,
                            meta: AttentionMetadata, kv_layers: Any) -> torch.Tensor:
            return model.forward(input_ids, positions, meta, kv_layers)

        # TorchDynamo keeps compiled graphs per code object and checks their guards in turn on
        # every call: a function of its own keeps these graphs out of the decode step's list
        # (whose every step would otherwise test their guards first, ~30 us each)
        self.compiled: Any = torch.compile(prefill_forward, dynamic=True, fullgraph=True,
                                            options=INDUCTOR_OPTIONS)
        self.ready = False
        self.compile_seconds = 0.0

        def fresh_forward(input_ids: torch.Tensor, positions: torch.Tensor,
                          meta: AttentionMetadata, kv_layers: Any) -> torch.Tensor:
            return model.forward(input_ids, positions, meta, kv_layers)

        # a long fresh prompt of one row (plain causal attention): its elementwise work fused
        # (RoPE, norms, SwiGLU: ~8 of a 1,600-token prompt's ~31 ms on the demo model, two
        # threads) -> 24 ms; the Python wrapper (its call costs nothing next to the step) and
        # compiled at the thread count it runs at (Dynamo recompiles on another)
        self.fresh: Any = torch.compile(fresh_forward, dynamic=True, fullgraph=True)
        self.fresh_threads: int | None = None  # set once the long fresh graph is compiled
        self.num_steps = 0  # steps run through the compiled graphs after warm-up

    @staticmethod
    def applies(input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether a step with these inputs has a compiled graph (masked, > 1 new token)."""
        return meta.attn_mask is not None and input_ids.shape[1] > 1

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor,
                 meta: AttentionMetadata, kv_layers: list[tuple[torch.Tensor, torch.Tensor]]
                 ) -> torch.Tensor:
        self.num_steps += 1
        return self.compiled(input_ids, positions, meta, kv_layers)

    @staticmethod
    def applies_fresh(input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether a step is one row's long fresh prefill (the `fresh` graph's shape)."""
        return (meta.attn_mask is None and input_ids.shape[0] == 1
                and input_ids.shape[1] >= PREFILL_TOKENS)

    @torch.inference_mode()
    def warm_up_fresh(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]], row_len: int,
                      scratch_row: int, threads: int, fast: bool) -> bool:
        """Compile the long fresh prefill graph now, on `threads` torch threads and with the
        fp32 path long forwards take (long_forward.py), as it will run. K/V writes go to the
        scratch row. False (eager from then on) when the rows are too short or it fails."""
        if row_len <= PREFILL_TOKENS + 1:
            return False
        steady = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with fast_fp32(fast):
                seconds = compile_now("long prefill step", lambda: self._run_fresh_shapes(
                    kv_layers, row_len, scratch_row))
        finally:
            torch.set_num_threads(steady)
        if seconds is None:
            return False
        self.fresh_threads = threads
        return True

    def _run_fresh_shapes(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                          row_len: int, scratch_row: int) -> None:
        device = kv_layers[0][0].device
        for tokens in (PREFILL_TOKENS, PREFILL_TOKENS + 1):  # the token count symbolic
            positions = torch.arange(tokens, device=device).unsqueeze(0)
            slots = positions[0] + scratch_row * row_len
            meta = build_attention_metadata(positions, slots, None, [tokens], True, 0)
            ids = torch.zeros((1, tokens), dtype=torch.long, device=device)
            assert self.applies_fresh(ids, meta)
            self.fresh(ids, positions, meta, kv_layers)

    @torch.inference_mode()
    def warm_up(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]], row_len: int,
                scratch_row: int, max_rows: int) -> bool:
        """Compile both graphs now. K/V writes go to the scratch row (never read); reads cover
        rows [first, first + rows), whose contents do not matter. False (and eager from then on)
        when compiling fails."""
        seconds = compile_now("masked prefill step",
                              lambda: self._run_warm_shapes(kv_layers, row_len, scratch_row,
                                                            max_rows))
        if seconds is None:
            return False
        self.compile_seconds, self.ready = seconds, True
        return True

    def _run_warm_shapes(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                         row_len: int, scratch_row: int, max_rows: int) -> None:
        device = kv_layers[0][0].device
        for rows, new, keys, first in _WARM_SHAPES:
            if first + rows > max_rows or keys >= row_len:
                continue
            lens = [keys - i for i in range(rows)]  # unequal rows, each with a cached part
            positions = torch.tensor([[n - new + j for j in range(new)] for n in lens],
                                     device=device)
            slots = torch.full((rows * new,), scratch_row * row_len, device=device)
            meta = build_attention_metadata(positions, slots, None, lens, False, first)
            assert self.applies(positions, meta)
            ids = torch.zeros((rows, new), dtype=torch.long, device=device)
            self.compiled(ids, positions, meta, kv_layers)
