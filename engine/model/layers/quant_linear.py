"""`QuantLinear`: a projection whose GGUF blocks stay 4-bit, multiplied by torch's CPU int4 kernel.

`torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, scales_and_zeros)` computes
`x @ w.T` with w = (code - 8) * scale + zero per group of 32 inputs (gguf_blocks.py maps Q4_0,
Q4_1, Q4_K and Q8_0 onto that); x, scales and zeros are bf16. Chosen by measurement
(benchmarks/RESULTS.md, "GGUF weights kept quantized"): one SmolLM2-135M decode step's
projections, one thread, CPU ms, bf16 oneDNN-packed / int4 kernel / `_weight_int8pack_mm`:
batch 1 7.8 / 3.8 / 6.4, batch 4 8.1 / 5.6 / 7.1, batch 8 9.7 / 10.5 / 12.9, batch 16 13.7 /
20.7 / 23.8; batch 256 (a prefill) 111 / 305. `_dyn_quant_matmul_4bit` and the int4 kernel with
float32 inputs have no fast path on x86 (150-1,700 ms): float32 engines dequantize instead.

Q8_0 is two int4 matrices summed (`repeat = 2`): one kernel call on the input written twice.
A fused projection (qkv, gate_up) whose parts differ (a Q6_K v beside Q4_K q and k, the
mix of llama.cpp's Q4_K_M files) is split into segments, each one matmul, outputs concatenated:
runs of int4 parts with one `repeat`, and dense bf16 parts for types kept dequantized.

On CUDA the same groups run through kernels/int4_matmul.py (`TritonInt4Matmul`: codes two a
byte, each group's scale and zero in the model's dtype, dequantized tile by tile inside the
Triton kernel), in any float dtype and at any row count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from thinkgate.engine.model.layers.gguf_blocks import GROUP, Int4Groups
from thinkgate.engine.model.layers.packed_linear import PackedLinear
from thinkgate.kernels.int4_matmul import int4_matmul, pack_int4
from torch import nn

_ROWS_MULTIPLE = 16  # the int4 pack needs the output count to be a multiple of 16


def int4_backend(device: torch.device | str, dtype: torch.dtype) -> str | None:
    """Which int4 matmul projections take here: "cpu" (torch's CPU int4 kernel: bf16 compute
    only), "triton" (kernels/int4_matmul.py: CUDA), or None (they are dequantized)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return "triton"
    if (kind == "cpu" and dtype == torch.bfloat16
            and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")):
        return "cpu"
    return None


def int4_supported(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether projections can stay int4 here (`int4_backend` names one)."""
    return int4_backend(device, dtype) is not None


class Int4Matmul(nn.Module):
    """`x @ w.T` for `Int4Groups` w (N, K): packed codes and (groups, N, 2) bf16 scales/zeros."""

    def __init__(self, groups: Int4Groups) -> None:
        super().__init__()
        self.out_features, self.in_features = groups.shape
        self.repeat = groups.repeat
        codes = groups.codes.to(torch.int32)
        self.register_buffer(
            "packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        )
        scales_zeros = torch.stack((groups.scales.t(), groups.zeros.t()), dim=-1)
        self.register_buffer("scales_zeros", scales_zeros.to(torch.bfloat16).contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if self.repeat > 1:
            rows = torch.cat([rows] * self.repeat, dim=-1)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows.contiguous(), self.packed, GROUP, self.scales_zeros
        )
        return y.view(*x.shape[:-1], self.out_features)


class TritonInt4Matmul(nn.Module):
    """`x @ w.T` for `Int4Groups` w through `kernels.int4_matmul` (the GPU path; the twin on a
    CPU tensor, Triton's interpreter under TRITON_INTERPRET=1)."""

    def __init__(self, groups: Int4Groups, dtype: torch.dtype) -> None:
        super().__init__()
        self.out_features, self.in_features = groups.shape
        self.repeat = groups.repeat
        self.register_buffer("packed", pack_int4(groups.codes))
        scales_zeros = torch.stack((groups.scales, groups.zeros), dim=-1)
        self.register_buffer("scales_zeros", scales_zeros.to(dtype).contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int4_matmul(x, self.packed, self.scales_zeros, self.repeat, check=False)


class DenseMatmul(nn.Module):
    """`x @ w.T` for a weight kept dense: oneDNN-packed where it can be, else `F.linear`."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = PackedLinear(weight) if PackedLinear.supported(weight) else None
        self.register_buffer("weight", None if self.packed else weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.packed(x) if self.packed is not None else F.linear(x, self.weight)


class QuantLinear(nn.Module):
    """A linear layer from GGUF parts stacked by output rows (q, k, v or gate, up, or one):
    `Int4Groups` stay int4, float tensors (types without a packing) stay dense in `dtype`."""

    def __init__(self, parts: list[Int4Groups | torch.Tensor], bias: bool,
                 dtype: torch.dtype, backend: str = "cpu") -> None:
        super().__init__()
        if backend not in ("cpu", "triton"):
            raise ValueError(f"QuantLinear: backend must be 'cpu' or 'triton', got {backend!r}")
        self.segments = nn.ModuleList(_segment(run, dtype, backend) for run in _runs(parts))
        self.in_features = self.segments[0].in_features
        self.out_features = sum(seg.out_features for seg in self.segments)
        self.bias = nn.Parameter(torch.zeros(self.out_features, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [seg(x) for seg in self.segments]
        y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
        return y if self.bias is None else y + self.bias

    @property
    def nbytes(self) -> int:
        """Bytes its weights take (packed codes, scales, zeros, dense parts)."""
        total = sum(b.numel() * b.element_size() for b in self.buffers())
        for seg in self.segments:
            if isinstance(seg, DenseMatmul) and seg.packed is not None:
                total += seg.in_features * seg.out_features * 2
        return total


def _runs(parts: list[Int4Groups | torch.Tensor]) -> list[list[Int4Groups | torch.Tensor]]:
    """Neighbouring parts of one kind (dense, or int4 of one repeat) grouped together."""
    def kind(part: Int4Groups | torch.Tensor) -> int:
        return part.repeat if isinstance(part, Int4Groups) else 0

    runs: list[list[Int4Groups | torch.Tensor]] = []
    for part in parts:
        if runs and kind(runs[-1][-1]) == kind(part):
            runs[-1].append(part)
        else:
            runs.append([part])
    return runs


def _segment(run: list[Int4Groups | torch.Tensor], dtype: torch.dtype,
             backend: str) -> nn.Module:
    if isinstance(run[0], Int4Groups):
        groups = Int4Groups(
            torch.cat([p.codes for p in run]), torch.cat([p.scales for p in run]),
            torch.cat([p.zeros for p in run]), run[0].repeat,
        )
        if backend == "triton":
            return TritonInt4Matmul(groups, dtype)
        if groups.shape[0] % _ROWS_MULTIPLE == 0:
            return Int4Matmul(groups)
        return DenseMatmul(groups.dequantize().to(dtype))
    return DenseMatmul(torch.cat(run).to(dtype))
