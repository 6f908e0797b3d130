"""`PackedLinear`: a float32 CPU linear whose weight oneDNN has re-laid out once, at load.

`F.linear` on CPU reads the (out, in) weight in its checkpoint layout on every call; oneDNN's
pre-packed ("blocked") copy of the weight makes the 8k- to 150k-wide lm_head matmul about 1.4x
(batch 1) to 2x (batch 8-32) faster on AVX-512 (benchmarks/RESULTS.md). Small matrices (the
decoder layers' projections) gain nothing: the call's fixed cost eats the difference. The packed
copy is extra memory (out x in floats), so only the lm_head uses it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_BATCH_HINT = 32  # oneDNN picks its blocking for this many rows; any batch size runs


class PackedLinear:
    """`y = x @ weight.T` through oneDNN; `x` is (N, in) float32 on the CPU."""

    def __init__(self, weight: torch.Tensor) -> None:
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _BATCH_HINT)
        self.out_features = weight.shape[0]

    @staticmethod
    def supported(weight: torch.Tensor) -> bool:
        return (
            weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def linear(x: torch.Tensor, weight: torch.Tensor, packed: PackedLinear | None) -> torch.Tensor:
    """`F.linear(x, weight)`, through `packed` when there is one and `x` is 2-D."""
    if packed is not None and x.dim() == 2:
        return packed(x)
    return F.linear(x, weight)
