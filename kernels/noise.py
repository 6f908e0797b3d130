"""Counter-based Gumbel noise, bit-identical in Triton and torch.

Sampling is Gumbel-max: a row's token is ``argmax_i (x_i / T + g_i)`` over allowed ``i`` with
``g_i`` i.i.d. Gumbel(0, 1). The noise is a pure function of ``(seed, step, column)``:

    r0..r3 = Philox4x32-10(key=(seed_lo, seed_hi), counter=(column // 4, step_lo, step_hi, 0))
    r      = r[column % 4]                                  # a uint32
    u      = (2 * (r >> 9) + 1) * 2**-24                    # in (0, 1), exact in fp32
    g2     = -log2(-log2(u))                                # Gumbel noise in base-2 units

and the kernels rank ``key_i = x_i * (log2(e) / T) + g2_i``, which orders tokens exactly as
``x_i / T + g_i`` does (both sides scaled by log2(e), plus a constant). ``log2`` is a
range reduction plus a degree-7 polynomial built only from IEEE-rounded multiplies and adds, so
the Triton kernel (compiled with ``enable_fp_fusion=False``, or interpreted) and this torch twin
produce the same bits. A request's noise depends only on its own seed and step, never on the
batch it shares.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
LOG2E = 1.4426950408889634
_MASK32 = 0xFFFFFFFF
_SQRT2 = 1.4142135381698608  # fp32(sqrt(2))
_UNIT = 5.9604644775390625e-08  # 2**-24
# log2(1 + f) = f * P(f) on [sqrt(1/2) - 1, sqrt(2) - 1]; least squares on Chebyshev nodes,
# rounded to fp32; max abs error 1.4e-7.
_P0, _P1, _P2, _P3 = 1.442694902420044, -0.721352756023407, 0.4809240400791168, -0.36024197936058044
_P4, _P5, _P6, _P7 = 0.28707560896873474, -0.24882180988788605, 0.2342098504304886, -0.14620353281497955


# ----------------------------------------------------------------------------- torch twin


def _mul32_ref(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of a * m for uint32 values held in int64, without overflow."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    p_hi, p_lo = a_hi * m, a_lo * m  # each < 2**48
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & _MASK32
    return hi, lo


def philox_ref(
    seed: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 on int64 tensors holding uint32 values (seed: any int64); broadcasts."""
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(PHILOX_ROUNDS):
        hi0, lo0 = _mul32_ref(c0, PHILOX_M0)
        hi1, lo1 = _mul32_ref(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + PHILOX_W0) & _MASK32, (k1 + PHILOX_W1) & _MASK32
    return c0, c1, c2, c3


def log2_ref(x: torch.Tensor) -> torch.Tensor:
    """log2 of positive normal fp32 values, the same bits as the Triton `_log2`."""
    bits = x.view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127
    m = ((bits & 0x7FFFFF) | 0x3F800000).view(torch.float32)
    big = m > _SQRT2
    m = torch.where(big, m * 0.5, m)
    e = e + big.to(torch.int32)
    f = m - 1.0
    p = f * _P7 + _P6
    for c in (_P5, _P4, _P3, _P2, _P1, _P0):
        p = p * f + c
    return e.to(torch.float32) + f * p


def gumbel2_ref(r: torch.Tensor) -> torch.Tensor:
    """Base-2 Gumbel noise -log2(-log2(u)) from uint32 values held in int64."""
    u = ((r >> 9) * 2 + 1).to(torch.float32) * _UNIT
    return -log2_ref(-log2_ref(u))


def gumbel_noise_ref(seeds: torch.Tensor, steps: torch.Tensor, num_cols: int) -> torch.Tensor:
    """(B, num_cols) fp32 base-2 Gumbel noise for rows with the given int64 seeds and steps."""
    device = seeds.device
    groups = torch.arange((num_cols + 3) // 4, device=device, dtype=torch.int64)[None, :]
    steps = steps.to(torch.int64)[:, None]
    c1, c2 = steps & _MASK32, (steps >> 32) & _MASK32
    zero = torch.zeros_like(groups)
    r = philox_ref(seeds.to(torch.int64)[:, None], groups, c1, c2, zero)
    words = torch.stack(r, dim=-1).reshape(seeds.shape[0], -1)[:, :num_cols]  # (B, 4 * groups)
    return gumbel2_ref(words)


# ----------------------------------------------------------------------------- Triton


@triton.jit
def _philox(seed_lo, seed_hi, c0, c1, c2, c3):
    """Philox4x32-10 on uint32 tensors; the key is two uint32 scalars."""
    k0 = seed_lo
    k1 = seed_hi
    for _ in tl.static_range(10):
        hi0 = tl.umulhi(c0, 0xD2511F53)
        lo0 = c0 * 0xD2511F53
        hi1 = tl.umulhi(c2, 0xCD9E8D57)
        lo1 = c2 * 0xCD9E8D57
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


@triton.jit
def _log2(x):
    bits = x.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127
    m = ((bits & 0x7FFFFF) | 0x3F800000).to(tl.float32, bitcast=True)
    big = m > 1.4142135381698608
    m = tl.where(big, m * 0.5, m)
    e = e + big.to(tl.int32)
    f = m - 1.0
    p = f * -0.14620353281497955 + 0.2342098504304886
    p = p * f + -0.24882180988788605
    p = p * f + 0.28707560896873474
    p = p * f + -0.36024197936058044
    p = p * f + 0.4809240400791168
    p = p * f + -0.721352756023407
    p = p * f + 1.442694902420044
    return e.to(tl.float32) + f * p


@triton.jit
def _gumbel2(r):
    """Base-2 Gumbel noise from uint32 tensor `r`."""
    u = ((r >> 9) * 2 + 1).to(tl.float32) * 5.9604644775390625e-08
    return -_log2(-_log2(u))
