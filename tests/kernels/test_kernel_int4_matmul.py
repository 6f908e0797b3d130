"""int4_matmul: the nibble layout, Triton == twin == the module doc's formula in float64, Q8_0's
two halves summed, argument errors."""

from __future__ import annotations

import pytest
import torch
from thinkgate.kernels.int4_matmul import (
    GROUP,
    int4_matmul,
    int4_matmul_ref,
    int4_matmul_triton,
    pack_int4,
    unpack_int4,
)

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _weight(n: int, k: int, repeat: int, gen: torch.Generator, dtype: torch.dtype):
    """Random codes and group scales/zeros, and the weight they mean per the module doc, written
    out element by element in float64 (independent of the module's own unpacking)."""
    codes = torch.randint(0, 16, (n, repeat * k), generator=gen, dtype=torch.uint8)
    sz = torch.stack((torch.rand(n, repeat * k // GROUP, generator=gen) * 0.1,
                      torch.randn(n, repeat * k // GROUP, generator=gen) * 0.05), -1).to(dtype)
    w = torch.zeros(n, k, dtype=torch.float64)
    s64 = sz.double()
    for c in range(repeat * k):
        g = c // GROUP
        w[:, c % k] += (codes[:, c].double() - 8) * s64[:, g, 0] + s64[:, g, 1]
    return codes, sz.contiguous(), w


def test_pack_puts_even_columns_in_low_nibbles() -> None:
    codes = torch.tensor([[1, 2, 15, 0], [7, 8, 3, 12]], dtype=torch.uint8)
    packed = pack_int4(codes)
    assert packed.tolist() == [[1 | 2 << 4, 15], [7 | 8 << 4, 3 | 12 << 4]]
    assert torch.equal(unpack_int4(packed), codes)


@pytest.mark.parametrize("m,n,k,repeat", [(1, 64, 64, 1), (5, 100, 96, 1), (17, 48, 128, 2),
                                          (3, 130, 32, 2)])
def test_triton_matches_the_twin_and_the_formula(m, n, k, repeat, gen, device) -> None:
    codes, sz, w = _weight(n, k, repeat, gen, torch.float32)
    x = torch.randn(m, k, generator=gen)
    packed = pack_int4(codes)
    want = x.double() @ w.T
    twin = int4_matmul_ref(x, packed, sz, repeat)
    got = int4_matmul_triton(x.to(device), packed.to(device), sz.to(device), repeat).cpu()
    scale = want.abs().max().item()
    assert (twin.double() - want).abs().max().item() <= 1e-5 * scale
    assert (got.double() - want).abs().max().item() <= 1e-5 * scale
    assert got.shape == (m, n) and got.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_and_leading_dimensions(dtype, gen, device) -> None:
    codes, sz, w = _weight(80, 64, 1, gen, dtype)
    x = torch.randn(2, 3, 64, generator=gen).to(dtype)
    got = int4_matmul(x.to(device), pack_int4(codes).to(device), sz.to(device)).cpu()
    want = x.double() @ w.T
    assert got.shape == (2, 3, 80) and got.dtype == dtype
    assert (got.double() - want).abs().max().item() <= TOL[dtype] * want.abs().max().item()


def test_no_rows(device) -> None:
    packed = torch.zeros(16, 16, dtype=torch.uint8)
    sz = torch.zeros(16, 1, 2)
    assert int4_matmul(torch.zeros(0, 32, device=device), packed.to(device),
                       sz.to(device)).shape == (0, 16)


def test_gguf_groups_through_the_kernel(gen, device) -> None:
    """The engine's Int4Groups (GGUF Q8_0's two halves: repeat 2) in the kernel's layout give
    `x @ groups.dequantize().T`."""
    from thinkgate.engine.model.layers.gguf_blocks import Int4Groups

    n, k = 48, 64
    q = torch.randint(-128, 128, (n, k), generator=gen)
    d = torch.rand(n, k // GROUP, generator=gen, dtype=torch.float64) * 0.01
    groups = Int4Groups(torch.cat(((q >> 4) + 8, q & 15), 1).to(torch.uint8),
                        torch.cat((16 * d, d), 1),
                        torch.cat((torch.zeros_like(d), 8 * d), 1), repeat=2)
    exact = (q.double().view(n, -1, GROUP) * d.unsqueeze(-1)).view(n, k)
    assert torch.allclose(groups.dequantize().double(), exact, atol=1e-6)
    sz = torch.stack((groups.scales, groups.zeros), -1).float().contiguous()
    x = torch.randn(4, k, generator=gen)
    got = int4_matmul(x.to(device), pack_int4(groups.codes).to(device), sz.to(device), 2).cpu()
    want = x.double() @ exact.T
    assert (got.double() - want).abs().max().item() <= 1e-5 * want.abs().max().item()


@pytest.mark.parametrize("change,message", [
    (lambda a: {**a, "x": torch.zeros(2, 40)}, "multiple of 32"),
    (lambda a: {**a, "packed": a["packed"].int()}, "uint8"),
    (lambda a: {**a, "packed": a["packed"][:, :8].contiguous()}, "expected repeat"),
    (lambda a: {**a, "scales_zeros": a["scales_zeros"][:, :1]}, "scales_zeros must be"),
    (lambda a: {**a, "repeat": 0}, "repeat must be"),
    (lambda a: {**a, "x": torch.zeros(2, 64, dtype=torch.int32)}, "fp32, fp16 or bf16"),
])
def test_bad_arguments_name_the_value(change, message) -> None:
    good = {"x": torch.zeros(2, 64), "packed": torch.zeros(16, 32, dtype=torch.uint8),
            "scales_zeros": torch.zeros(16, 2, 2), "repeat": 1}
    int4_matmul(**good)
    with pytest.raises(ValueError, match=message):
        int4_matmul(**change(good))
