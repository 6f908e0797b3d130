"""GGUF quantized blocks → groups of 32 int4 codes with a scale and a zero each.

Every packed format here becomes one shape (`Int4Groups`): for row n and group g of 32 columns,

    w[n, k] = (codes[n, k] - 8) * scales[n, g] + zeros[n, g]        codes in 0..15

which is the convention of torch's CPU int4 kernel (quant_linear.py). The formats, per block of
one row (all little-endian; `half` is IEEE fp16):

- Q4_0, 32 weights in 18 bytes: `half d; u8 qs[16]`; weight j < 16 is `qs[j] & 15`, weight
  j >= 16 is `qs[j - 16] >> 4`; w = d * (q - 8): scale d, zero 0.
- Q4_1, 32 weights in 20 bytes: `half d; half m; u8 qs[16]` (nibbles as Q4_0); w = d * q + m:
  scale d, zero m + 8d.
- Q4_K, 256 weights in 144 bytes: `half d; half dmin; u8 scales[12]; u8 qs[128]`. Sub-block j
  (0..7, 32 weights) has a 6-bit scale sc_j and a 6-bit min m_j: for j < 4, sc_j =
  scales[j] & 63 and m_j = scales[j + 4] & 63; for j >= 4, sc_j = (scales[j + 4] & 15) |
  (scales[j - 4] >> 6) << 4 and m_j = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. The
  codes come in 4 runs of 32 bytes: run r holds sub-block 2r in its low nibbles and 2r + 1 in
  its high nibbles. w = d * sc_j * q - dmin * m_j: scale d * sc_j, zero 8 * scale - dmin * m_j.
- Q8_0, 32 weights in 34 bytes: `half d; i8 qs[32]`; w = d * q. An int8 is two nibbles,
  q = 16 * hi + lo with lo = q & 15 and hi = q >> 4 (in -8..7), so the row becomes two int4
  rows read against the same input twice (`repeat = 2`: columns [0, K) hold hi with scale 16d
  and zero 0, columns [K, 2K) hold lo with scale d and zero 8d), and the sum is d * q exactly.

Scales and zeros are kept in float64, where they are exact (an fp16 times a 6-bit integer, or
a difference of two such), so `dequantize` rounds each weight once, as the `gguf` package does. Other block types are dequantized by the `gguf`
package (`dequantize`), exactly, to float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

GROUP = 32  # weights per scale in every packed format
PACKED_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q8_0")
_BLOCK_BYTES = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q4_K": (256, 144), "Q8_0": (32, 34)}


@dataclass
class Int4Groups:
    """`repeat` int4 matrices side by side whose sum is the weight (N, K); see the module doc."""

    codes: torch.Tensor  # (N, repeat * K) uint8 in 0..15
    scales: torch.Tensor  # (N, repeat * K / 32) float64
    zeros: torch.Tensor  # (N, repeat * K / 32) float64
    repeat: int = 1

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape[0], self.codes.shape[1] // self.repeat

    def dequantize(self) -> torch.Tensor:
        """The weight (N, K) in float32: what the codes mean (the test's spec)."""
        n, k = self.shape
        groups = self.codes.view(n, -1, GROUP).double() - 8
        w = (groups * self.scales.unsqueeze(-1) + self.zeros.unsqueeze(-1)).view(n, -1)
        return w.view(n, self.repeat, k).sum(dim=1).float()

    def rows(self, index: torch.Tensor) -> Int4Groups:
        """The rows at `index` (a permutation or a selection) in that order."""
        return Int4Groups(self.codes[index], self.scales[index], self.zeros[index], self.repeat)


def _blocks(raw: np.ndarray, qtype: str, shape: tuple[int, int]) -> np.ndarray:
    """The raw bytes (N, row bytes) as (N, blocks, block bytes) uint8 (bit twiddling runs in
    numpy: its uint8 shifts are ~100x faster than torch's here)."""
    n, k = shape
    weights, nbytes = _BLOCK_BYTES[qtype]
    if k % weights:
        raise ValueError(f"a {qtype} row holds whole blocks of {weights}; got {k} columns")
    data = np.asarray(raw).view(np.uint8)
    if data.size != n * (k // weights) * nbytes:
        raise ValueError(f"{qtype} data of {data.size} bytes does not hold a {n}x{k} weight")
    return data.reshape(n, k // weights, nbytes)


def _half(blocks: np.ndarray, start: int) -> torch.Tensor:
    """The fp16 at byte `start` of every block, as float64 (N, blocks)."""
    values = np.ascontiguousarray(blocks[..., start : start + 2]).view(np.float16)[..., 0]
    return torch.from_numpy(values.astype(np.float64))


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., 16) bytes → (..., 32) codes: the low nibbles, then the high ones."""
    return np.concatenate((qs & 15, qs >> 4), axis=-1)


def unpack(raw: np.ndarray, qtype: str, shape: tuple[int, int]) -> Int4Groups:
    """A GGUF tensor's raw bytes (rows of blocks) of type `qtype` for a weight of `shape`
    (out, in) → `Int4Groups`; ValueError for a type outside `PACKED_TYPES`."""
    if qtype not in PACKED_TYPES:
        raise ValueError(f"GGUF type {qtype} has no int4 packing (packed: {PACKED_TYPES})")
    n, k = shape
    blocks = _blocks(raw, qtype, shape)
    d = _half(blocks, 0)
    if qtype == "Q4_0":
        return Int4Groups(_codes(_nibbles(blocks[..., 2:]), n), d, torch.zeros_like(d))
    if qtype == "Q4_1":
        return Int4Groups(_codes(_nibbles(blocks[..., 4:]), n), d, _half(blocks, 2) + 8 * d)
    if qtype == "Q8_0":
        q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)  # (N, B, 32)
        hi, lo = ((q >> 4) + 8).astype(np.uint8), (q & 15).astype(np.uint8)
        codes = torch.cat((_codes(hi, n), _codes(lo, n)), dim=1)
        scales = torch.cat((16 * d, d), dim=1)
        zeros = torch.cat((torch.zeros_like(d), 8 * d), dim=1)
        return Int4Groups(codes, scales, zeros, repeat=2)
    return _unpack_q4_k(blocks, n, k)


def _codes(values: np.ndarray, n: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values).reshape(n, -1))


def _unpack_q4_k(blocks: np.ndarray, n: int, k: int) -> Int4Groups:
    d, dmin = _half(blocks, 0).unsqueeze(-1), _half(blocks, 2).unsqueeze(-1)  # (N, B, 1)
    s = blocks[..., 4:16]  # (N, B, 12)
    sc = np.concatenate((s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)), -1)
    m = np.concatenate((s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)), -1)
    runs = blocks[..., 16:].reshape(n, -1, 4, 32)  # (N, B, run, 32 bytes)
    codes = np.stack((runs & 15, runs >> 4), axis=3)  # (N, B, run, low/high, 32)
    scales = d * torch.from_numpy(sc.astype(np.float64))  # (N, B, 8)
    zeros = 8 * scales - dmin * torch.from_numpy(m.astype(np.float64))
    return Int4Groups(_codes(codes, n), scales.reshape(n, -1), zeros.reshape(n, -1))


def dequantize(raw: np.ndarray, qtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Any GGUF tensor → float32 of `shape`: the packed formats through `unpack`, float types
    as they are, every other type through the `gguf` package; ValueError naming the type when
    neither reads it."""
    if qtype in PACKED_TYPES and len(shape) == 2:
        return unpack(raw, qtype, (shape[0], shape[1])).dequantize()
    if qtype in ("F32", "F16", "BF16", "F64"):
        data = torch.from_numpy(np.array(raw, copy=True, subok=False))
        if qtype == "BF16":  # numpy has no bfloat16: the reader gives its bytes
            data = data.view(torch.uint8).view(torch.bfloat16)
        return data.float().reshape(shape)
    import gguf

    try:
        values = gguf.quants.dequantize(np.asarray(raw), gguf.GGMLQuantizationType[qtype])
    except (NotImplementedError, KeyError) as exc:
        raise ValueError(
            f"GGUF type {qtype} can be neither packed ({', '.join(PACKED_TYPES)}) nor "
            f"dequantized by the installed gguf package: {exc}"
        ) from exc
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(shape)
