"""`QuantEmbedding`: a 4-bit token embedding that is also the tied lm_head, stored once.

A GGUF file whose `token_embd` is Q4_0, Q4_1 or Q4_K (llama.cpp's `--pure` files, many Q4
quants of small models) keeps it packed: the lm_head runs the projections' int4 matmul
(`Int4Matmul` on a CPU in bf16, `TritonInt4Matmul` on CUDA) and a lookup reads the looked-up
rows' codes out of that same packed weight and dequantizes them, so the table takes 0.625 byte a
weight instead of bf16's 2 and there is no second copy for the head (dense, the embedding and
oneDNN's packed head hold it twice). SmolLM2-135M's 49,152 x 576 table: 17 MiB against 108.

Torch's CPU int4 pack (`_convert_weight_to_int4pack_for_cpu`, torch 2.13) lays rows out in
blocks of 64: block b is a (K, 32) byte array whose byte (k, j % 32) holds row 64b + j's code k,
rows j < 32 in the low nibble and the others in the high one. That layout is not a documented
API, so `cpu_layout_ok` checks it on a probe at load, and the loader keeps a dense embedding
where it does not hold. Q8_0 tables (two int4 halves) stay dense: their head would run two
int4 matmuls, 2.4x slower than bf16's at batch 8 (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import torch
from thinkgate.engine.model.layers.gguf_blocks import GROUP, Int4Groups
from thinkgate.engine.model.layers.quant_linear import Int4Matmul, TritonInt4Matmul
from thinkgate.kernels.int4_matmul import unpack_int4
from torch import nn

_CPU_BLOCK = 64  # rows per block of torch's CPU int4 layout


def cpu_layout_ok() -> bool:
    """Whether torch's CPU int4 pack lays rows out as the module doc says (checked on a probe)."""
    if not hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"):
        return False
    codes = torch.randint(0, 16, (2 * _CPU_BLOCK, 2 * GROUP), generator=torch.Generator()
                          .manual_seed(0), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    ids = torch.arange(2 * _CPU_BLOCK)
    return packed.dtype == torch.uint8 and torch.equal(_cpu_codes(packed, ids, 2 * GROUP),
                                                       codes.to(torch.uint8))


def _cpu_codes(packed: torch.Tensor, ids: torch.Tensor, k: int) -> torch.Tensor:
    """Rows `ids` (T,) of codes (T, K) uint8 out of torch's CPU int4 layout."""
    blocks = packed.reshape(-1, k, GROUP)
    j = ids % _CPU_BLOCK
    cols = torch.arange(k, device=ids.device)
    data = blocks[(ids // _CPU_BLOCK).unsqueeze(-1), cols, (j % GROUP).unsqueeze(-1)]
    return (data >> (4 * (j >= GROUP)).to(torch.uint8).unsqueeze(-1)) & 15


class QuantEmbedding(nn.Module):
    """Token embedding (`forward(ids)`) and tied lm_head (`project(hidden)`) over one packed
    4-bit weight (V, H); `backend` as `QuantLinear`'s ("cpu": V a multiple of 64)."""

    def __init__(self, groups: Int4Groups, dtype: torch.dtype, backend: str) -> None:
        super().__init__()
        if groups.repeat != 1:
            raise ValueError("QuantEmbedding takes one int4 matrix (Q4_0, Q4_1, Q4_K), "
                             f"got {groups.repeat} halves")
        self.num_embeddings, self.embedding_dim = groups.shape
        self.dtype = dtype
        if backend == "cpu":
            if self.num_embeddings % _CPU_BLOCK:
                raise ValueError(f"QuantEmbedding on a CPU needs a multiple of {_CPU_BLOCK} "
                                 f"rows, got {self.num_embeddings}")
            self.head: nn.Module = Int4Matmul(groups)
        elif backend == "triton":
            self.head = TritonInt4Matmul(groups, dtype)
        else:
            raise ValueError(f"QuantEmbedding: backend must be 'cpu' or 'triton', got "
                             f"{backend!r}")
        self.backend = backend

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        k = self.embedding_dim
        if self.backend == "cpu":
            codes = _cpu_codes(self.head.packed, flat, k)
            sz = self.head.scales_zeros[:, flat].transpose(0, 1)  # (G, V, 2) → (T, G, 2)
        else:
            codes = unpack_int4(self.head.packed[flat])
            sz = self.head.scales_zeros[flat]  # (T, G, 2)
        sz = sz.float()
        w = (codes.view(-1, k // GROUP, GROUP).float() - 8) * sz[..., :1] + sz[..., 1:]
        return w.view(*ids.shape, k).to(self.dtype)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """The tied lm_head: `hidden @ table.T`."""
        return self.head(hidden)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())
