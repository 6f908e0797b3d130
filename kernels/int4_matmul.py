"""int4_matmul: `x @ w.T` for a weight kept as 4-bit codes in groups of 32, dequantized in tiles.

The weight (N, K) is `repeat` int4 matrices side by side whose sum is w (the convention of
engine/model/layers/gguf_blocks.py, which maps GGUF Q4_0, Q4_1, Q4_K and Q8_0 onto it): for
output row n and code column c in [0, repeat * K), with g = c // 32,

    w[n, c % K] += (code[n, c] - 8) * scale[n, g] + zero[n, g]            code in 0..15

Storage: `packed` (N, repeat * K / 2) uint8 holds two codes a byte (column 2j in the low
nibble, 2j + 1 in the high one: `pack_int4`); `scales_zeros` (N, repeat * K / 32, 2) holds each
group's scale and zero in the model's dtype. A Q4 weight takes 0.5 byte a weight plus 4 bytes per
32 in fp16/bf16 (0.625 in all), a quarter of bf16 plus the scales.

The kernel (`_int4_matmul_kernel`), one program per (BLOCK_M rows of x, BLOCK_N rows of w):
each step reads one group's codes for BLOCK_N outputs (16 bytes a row), unpacks and scales them
in registers to an fp32 (32, BLOCK_N) tile and accumulates `x_tile @ tile` with `tl.dot`; the
weight never exists in memory dequantized. Dots take fp32 operands (TF32 for bf16/fp16 inputs,
IEEE for fp32), as the other kernels here do (Triton's interpreter computes bf16 `tl.dot`
wrongly). The twin (`int4_matmul_ref`: unpack, dequantize in fp32, one matmul) is the spec and
the CPU path; on CPUs computing in bf16 the engine uses torch's own int4 kernel instead
(engine/model/layers/quant_linear.py), and this module is the GPU path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

GROUP = 32  # codes per scale and zero
# rows of x per program (tl.dot needs 16), rows of w per program, warps (kernels/README.md has
# the registers these take)
BLOCK_M, BLOCK_N, NUM_WARPS = 16, 64, 4


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """(N, C) codes in 0..15 (C even) → (N, C / 2) uint8, column 2j low, 2j + 1 high."""
    if codes.dim() != 2 or codes.shape[1] % 2:
        raise ValueError(f"pack_int4: codes must be (N, C) with C even, got {tuple(codes.shape)}")
    c = codes.to(torch.uint8)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """`pack_int4`'s inverse: (N, C / 2) uint8 → (N, C) uint8 codes."""
    return torch.stack((packed & 15, packed >> 4), dim=-1).reshape(packed.shape[0], -1)


def dequantize_int4(packed: torch.Tensor, scales_zeros: torch.Tensor, repeat: int
                    ) -> torch.Tensor:
    """The weight (N, K) in float32: the module doc's sum (the twin's and the tests' spec)."""
    codes = unpack_int4(packed).float()
    n, columns = codes.shape
    sz = scales_zeros.float()
    w = (codes.view(n, -1, GROUP) - 8) * sz[..., :1] + sz[..., 1:]
    return w.view(n, repeat, columns // repeat).sum(dim=1)


def int4_matmul_ref(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor,
                    repeat: int = 1) -> torch.Tensor:
    """Torch twin: (..., N) in x's dtype; the weight dequantized to fp32, one matmul."""
    w = dequantize_int4(packed, scales_zeros, repeat)
    return F.linear(x.float(), w.to(x.device)).to(x.dtype)


@triton.jit
def _int4_matmul_kernel(x_ptr, packed_ptr, sz_ptr, out_ptr, rows, n_out, k_in,
                        stride_x, stride_p, stride_s, stride_o,
                        REPEAT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < rows
    n_ok = rn < n_out
    x_rows = x_ptr + rm[:, None].to(tl.int64) * stride_x
    p_rows = packed_ptr + rn[None, :].to(tl.int64) * stride_p
    s_rows = sz_ptr + rn.to(tl.int64) * stride_s
    lane = tl.arange(0, GROUP)
    shift = (lane & 1) * 4
    groups = k_in // GROUP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, REPEAT * groups):
        ks = (g % groups) * GROUP + lane  # x's columns
        a = tl.load(x_rows + ks[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
        byte = tl.load(p_rows + (g * (GROUP // 2) + lane // 2)[:, None], mask=n_ok[None, :],
                       other=0)
        code = ((byte.to(tl.int32) >> shift[:, None]) & 15).to(tl.float32)
        scale = tl.load(s_rows + 2 * g, mask=n_ok, other=0.0).to(tl.float32)
        zero = tl.load(s_rows + 2 * g + 1, mask=n_ok, other=0.0).to(tl.float32)
        w = (code - 8.0) * scale[None, :] + zero[None, :]
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    tl.store(out_ptr + rm[:, None].to(tl.int64) * stride_o + rn[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def int4_matmul_triton(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor,
                       repeat: int = 1) -> torch.Tensor:
    """Launch the kernel on x viewed as (M, K); arguments already checked."""
    n_out = packed.shape[0]
    k_in = x.shape[-1]
    rows = x.reshape(-1, k_in)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], n_out, dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        precision = "ieee" if x.dtype == torch.float32 else "tf32"
        grid = (triton.cdiv(rows.shape[0], BLOCK_M), triton.cdiv(n_out, BLOCK_N))
        _int4_matmul_kernel[grid](
            rows, packed, scales_zeros, out, rows.shape[0], n_out, k_in,
            rows.stride(0), packed.stride(0), scales_zeros.stride(0), out.stride(0),
            REPEAT=repeat, GROUP=GROUP, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            PRECISION=precision, num_warps=NUM_WARPS,
        )
    return out.view(*x.shape[:-1], n_out)


def check_int4_matmul(x: object, packed: object, scales_zeros: object, repeat: object) -> None:
    """ValueError naming the first argument that does not fit the module doc's layout."""
    for name, t in (("x", x), ("packed", packed), ("scales_zeros", scales_zeros)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"int4_matmul: {name} must be a tensor, got {type(t).__name__}")
    assert isinstance(x, torch.Tensor) and isinstance(packed, torch.Tensor)
    assert isinstance(scales_zeros, torch.Tensor)
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"int4_matmul: repeat must be a positive int, got {repeat!r}")
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(f"int4_matmul: packed must be (N, C / 2) uint8, got "
                         f"{tuple(packed.shape)} {packed.dtype}")
    k = x.shape[-1] if x.dim() else 0
    if x.dim() == 0 or k == 0 or k % GROUP:
        raise ValueError(f"int4_matmul: x's last dimension must be a positive multiple of "
                         f"{GROUP}, got shape {tuple(x.shape)}")
    n = packed.shape[0]
    if packed.shape[1] * 2 != repeat * k:
        raise ValueError(f"int4_matmul: packed {tuple(packed.shape)} holds {packed.shape[1] * 2} "
                         f"codes a row, expected repeat * K = {repeat * k}")
    if tuple(scales_zeros.shape) != (n, repeat * k // GROUP, 2):
        raise ValueError(f"int4_matmul: scales_zeros must be {(n, repeat * k // GROUP, 2)}, got "
                         f"{tuple(scales_zeros.shape)}")
    if not (packed.is_contiguous() and scales_zeros.is_contiguous()):
        raise ValueError("int4_matmul: packed and scales_zeros must be contiguous")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"int4_matmul: x must be fp32, fp16 or bf16, got {x.dtype}")


def int4_matmul(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor,
                repeat: int = 1, check: bool = True) -> torch.Tensor:
    """(..., N): `x @ w.T` for the module doc's w. CUDA tensors (and CPU ones under
    TRITON_INTERPRET=1) run the Triton kernel, CPU tensors the twin. `check=False` skips the
    argument checks (the engine's own calls, whose layout the loader built)."""
    from thinkgate.kernels.backend import use_triton

    if check:
        check_int4_matmul(x, packed, scales_zeros, repeat)
    run = int4_matmul_triton if use_triton(x) else int4_matmul_ref
    return run(x, packed, scales_zeros, repeat)
