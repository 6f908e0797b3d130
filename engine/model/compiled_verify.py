"""`CompiledVerify`: the speculative verify step of the CPU contiguous layout through
`torch.compile`.

A step in which rows carry n-gram drafts (engine/core/speculative.py) computes each row's last
token and its k draft ids: a few queries per row over every cached key. Through the masked
prefill graph (compiled_prefill.py) such a step runs SDPA's grouped-query route, which repeats
K/V for each query head. This graph attends like the decode step instead
(`AttentionMetadata.packed_queries`, kv_cache.py): the query heads that share a K/V head and
the row's positions become that head's query rows, with each position's mask row, so no K/V is
repeated or copied.

Scope: CPU, native model, TORCH_SDPA, either KV layout (the paged one gathers each row's blocks
through its block table, whose width is symbolic too, as the decode graph's); only built when
the engine has a speculative config. `warm_up` compiles both graphs (one row, and several:
PyTorch specializes size 1) with the row count, new-token count, key count and first row (or
block-table width) symbolic, before the engine takes requests. Without the paged graph a model
whose rows do not fit the contiguous layout (SmolLM2 at 2,048 tokens in the CPU default
budget) ran every drafted step eagerly: 74 ms against the decode graph's 35 ms at batch 8.
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
                scratch_row: int, max_rows: int, paged: bool = False) -> bool:
        """Compile both graphs now. K/V writes go to the scratch row or block (never read);
        reads cover rows [first, first + rows), or the scratch block through the block tables
        (`paged`: `row_len` is the block size), whose contents do not matter. False (eager
        from then on) when compiling fails."""
        seconds = compile_now("verify step", lambda: self._run_warm_shapes(
            kv_layers, row_len, scratch_row, max_rows, paged))
        self.ready = seconds is not None
        return self.ready

    def _run_warm_shapes(self, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                         row_len: int, scratch_row: int, max_rows: int, paged: bool) -> None:
        device = kv_layers[0][0].device
        for index, (rows, new, keys, first) in enumerate(_WARM_SHAPES):
            tables = None
            if paged:  # 1-2 blocks of keys; tables one block wider, as the runner pads them
                keys, first = (1 + index % 2) * row_len - 1, 0
                width = -(-keys // row_len) + 1
                tables = torch.full((rows, width), scratch_row, device=device)
            elif first + rows > max_rows or keys >= row_len:
                continue
            lens = [keys - i for i in range(rows)]
            positions = torch.tensor([[n - new + j for j in range(new)] for n in lens],
                                     device=device)
            slots = torch.full((rows * new,), scratch_row * row_len, device=device)
            meta = dataclasses.replace(
                build_attention_metadata(positions, slots, tables, lens, False, first),
                packed_queries=True)
            ids = torch.zeros((rows, new), dtype=torch.long, device=device)
            assert self.applies(ids, meta)
            self.compiled(ids, positions, meta, kv_layers)
