"""PackedLinear (the lm_head's oneDNN-packed weight on CPU) computes what F.linear computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from thinkgate.engine.models.packed_linear import PackedLinear, linear


def test_supported_only_for_float32_cpu() -> None:
    assert not PackedLinear.supported(torch.zeros(4, 4, dtype=torch.bfloat16))
    assert not PackedLinear.supported(torch.zeros(4, 4, dtype=torch.float16))


@pytest.mark.skipif(
    not PackedLinear.supported(torch.zeros(1, 1)), reason="no oneDNN in this torch build"
)
@pytest.mark.parametrize("rows", [1, 8, 33])
def test_packed_matches_f_linear(rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(8064, 128, generator=gen)
    x = torch.randn(rows, 128, generator=gen)
    packed = PackedLinear(weight)
    out = linear(x, weight, packed)
    assert out.shape == (rows, 8064) and out.dtype == torch.float32
    assert torch.allclose(out, F.linear(x, weight), atol=1e-4, rtol=1e-5)
    assert torch.equal(linear(x[None], weight, packed), F.linear(x[None], weight))  # 3-D: F


def test_engine_packs_the_lm_head_on_a_float32_cpu(llm) -> None:
    model = llm.llm_engine.loaded.model
    expected = PackedLinear.supported(model.embed.weight)
    assert (model.packed_lm_head is not None) == expected
