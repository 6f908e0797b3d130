"""PackedLinear (oneDNN-packed weights on CPU) computes what F.linear computes, in fp32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from thinkgate.engine.model.layers.packed_linear import PackedLinear, linear, pack_linears
from torch import nn

_BF16 = PackedLinear.supported(torch.zeros(1, 1, dtype=torch.bfloat16))
_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-5), torch.bfloat16: dict(atol=0.1, rtol=2e-2)}


def test_supported_dtypes() -> None:
    assert not PackedLinear.supported(torch.zeros(4, 4, dtype=torch.float16))
    assert not PackedLinear.supported(torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="float16"):
        PackedLinear(torch.zeros(4, 4, dtype=torch.float16))


def _dtypes() -> list:
    dtypes = []
    if PackedLinear.supported(torch.zeros(1, 1)):
        dtypes.append(torch.float32)
    if _BF16:
        dtypes.append(torch.bfloat16)
    return dtypes or [pytest.param(None, marks=pytest.mark.skip(reason="no oneDNN in torch"))]


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("rows", [1, 8, 33])
def test_packed_matches_f_linear(rows: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(8064, 128, generator=gen).to(dtype)
    x = torch.randn(rows, 128, generator=gen).to(dtype)
    packed = PackedLinear(weight)
    out = linear(x, weight, packed)
    assert out.shape == (rows, 8064) and out.dtype == dtype
    assert torch.allclose(out.float(), F.linear(x, weight).float(), **_TOL[dtype])
    out3 = linear(x.view(1, rows, 128), weight, packed)  # (B, T, in) inputs too
    assert out3.shape == (1, rows, 8064) and torch.equal(out3[0], out)


@pytest.mark.parametrize("dtype", _dtypes())
def test_pack_linears_keeps_bias_and_frees_weight(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    module = nn.Module()
    module.proj = nn.Linear(64, 96, bias=True).to(dtype)
    x = torch.randn(3, 5, 64).to(dtype)
    expected = module.proj(x)
    pack_linears(module, ("proj",))
    assert isinstance(module.proj, PackedLinear) and not list(module.parameters())
    assert torch.allclose(module.proj(x).float(), expected.float(), **_TOL[dtype])


def test_engine_packs_the_lm_head_on_a_float32_cpu(llm) -> None:
    model = llm.llm_engine.loaded.model
    expected = PackedLinear.supported(model.embed.weight)
    assert (model.packed_lm_head is not None) == expected
    assert isinstance(model.layers[0].qkv, nn.Linear)  # float32 layers stay unpacked
