"""`CompiledVerify`: the speculative verify step of the CPU contiguous layout through
`torch.compile`.

A step in which rows carry n-gram drafts (engine/core/speculative.py) computes each row's last
token and its k draft ids: a few queries per row over every cached key. Through the masked
prefill graph (compiled_prefill.py) such a step runs SDPA's grouped-query route, which repeats
K/V for each query head. This graph attends like the decode step instead
(`AttentionMetadata.packed_queries`, kv_cache.py): the query heads that share a K/V head and
the row's positions become that head's query rows, with each position's mask row, so no K/V is
repeated or copied.

Scope as the masked prefill graph's: contiguous layout, CPU, native model, TORCH_SDPA; only
built when the engine has a speculative config. `warm_up` compiles both graphs (one row, and
several: PyTorch specializes size 1) with the row count, new-token count, key count and first
row symbolic, before the engine takes requests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from thinkgate.engine.kv.kv_cache import AttentionMetadata, build_attention_metadata
from thinkgate.engine.model.compiled_decode import INDUCTOR_OPTIONS, compile_now

# (rows, new tokens per row, keys of the longest row, first row): two shapes per graph, so every
# int that varies between steps is traced as a symbol
_WARM_SHAPES = ((1, 2, 5, 0), (1, 3, 7, 1), (2, 2, 6, 0), (3, 4, 9, 1))


class CompiledVerify:
    """`forward(input_ids, positions, meta, kv_layers)` of the model for verify steps (a mask,
    `meta.packed_queries`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        def verify_forward(input_ids: torch.Tensor, positions: torch.Tensor,
                           meta: AttentionMetadata, kv_layers: Any) -> torch.Tensor:
            return model.forward(input_ids, positions, meta, kv_layers)

        # a function of its own: Dynamo checks the guards of one code object's graphs in turn,
        # so these stay out of the decode and prefill steps' lists (compiled_prefill.py)
        self.compiled: Any = torch.compile(verify_forward, dynamic=True, fullgraph=True,
                                            options=INDUCTOR_OPTIONS)
        self.ready = False
        self.num_steps = 0  # steps run through it after warm-up

    @staticmethod
    def applies(input_ids: torch.Tensor, meta: AttentionMetadata) -> bool:
        return meta.packed_queries and meta.attn_mask is not None and input_ids.shape[1] > 1

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor,
                 meta: AttentionMetadata, kv_layers: list[tuple[torch.Tensor, torch.Tensor]]
                 ) -> torch.Tensor:
        self.num_steps += 1
        return self.compiled(input_ids, positions, meta, kv_layers)

    @torch.inference_mode()
    def warm_up(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]], row_len: int,
                scratch_row: int, max_rows: int) -> bool:
        """Compile both graphs now. K/V writes go to the scratch row (never read); reads cover
        rows [first, first + rows), whose contents do not matter. False (eager from then on)
        when compiling fails."""
        seconds = compile_now("verify step", lambda: self._run_warm_shapes(
            kv_layers, row_len, scratch_row, max_rows))
        self.ready = seconds is not None
        return self.ready

    def _run_warm_shapes(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                         row_len: int, scratch_row: int, max_rows: int) -> None:
        device = kv_layers[0][0].device
        for rows, new, keys, first in _WARM_SHAPES:
            if first + rows > max_rows or keys >= row_len:
                continue
            lens = [keys - i for i in range(rows)]
            positions = torch.tensor([[n - new + j for j in range(new)] for n in lens],
                                     device=device)
            slots = torch.full((rows * new,), scratch_row * row_len, device=device)
            meta = dataclasses.replace(
                build_attention_metadata(positions, slots, None, lens, False, first),
                packed_queries=True)
            ids = torch.zeros((rows, new), dtype=torch.long, device=device)
            assert self.applies(ids, meta)
            self.compiled(ids, positions, meta, kv_layers)
