"""`PackedLinear`: a CPU linear whose weight oneDNN has re-laid out once, at load.

`F.linear` on CPU reads the (out, in) weight in its checkpoint layout on every call; oneDNN's
pre-packed ("blocked") copy runs the matmul on its own kernels. Measured on AVX-512 with
AVX512-BF16/AMX, one thread (benchmarks/RESULTS.md, "bf16 on CPU"):

- float32: the 8k- to 150k-wide lm_head is about 1.4x (batch 1) to 2x (batch 8-32) faster; the
  decoder layers' projections are slower packed at batch 1 (38 vs 31 ms per SmolLM2 step), so
  only the lm_head is packed (its plain weight stays: it is the tied embedding, or small).
- bfloat16: every projection is 1.4-2.3x faster packed than `F.linear` in bf16 (a whole
  SmolLM2 step's projections: 21 vs 31 ms), so the decoder layers' linears are replaced by
  packed ones too; their plain weights are dropped, so that costs no extra memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_BATCH_HINT = 32  # oneDNN picks its blocking for this many rows; any batch size runs


class PackedLinear(nn.Module):
    """`y = x @ weight.T + bias` through oneDNN; `x` is (..., in) on the CPU in weight's dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if not self.supported(weight):
            raise ValueError(
                f"PackedLinear needs a float32 or bfloat16 CPU weight with oneDNN, got "
                f"{weight.dtype} on {weight.device}"
            )
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _BATCH_HINT)
        self.bias = None if bias is None else bias.detach()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    @staticmethod
    def supported(weight: torch.Tensor) -> bool:
        if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
            return False
        if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
            return False
        if weight.dtype == torch.bfloat16:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return weight.dtype == torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # an opaque call in the graph (compiled_decode.py)
            return packed_linear_op(x, self.packed, self.bias, self.out_features)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


@torch.library.custom_op("thinkgate::packed_linear", mutates_args=())
def packed_linear_op(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
                     out_features: int) -> torch.Tensor:
    """oneDNN's packed linear as a custom op: TorchInductor's own lowering of
    `mkldnn._linear_pointwise` expects weights it packed itself and fails on ours."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@packed_linear_op.register_fake
def _packed_linear_shape(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
                         out_features: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


def linear(x: torch.Tensor, weight: torch.Tensor, packed: PackedLinear | None) -> torch.Tensor:
    """`F.linear(x, weight)`, through `packed` when there is one."""
    if packed is not None:
        return packed(x)
    return F.linear(x, weight)


def pack_linears(module: nn.Module, names: tuple[str, ...]) -> None:
    """Replace `module`'s `nn.Linear` children called `names` by packed copies (weights freed)."""
    for name in names:
        child = getattr(module, name)
        if isinstance(child, nn.Linear) and PackedLinear.supported(child.weight):
            setattr(module, name, PackedLinear(child.weight, child.bias))
