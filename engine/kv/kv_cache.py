"""The paged KV cache and attention over it.

Layout per layer: K and V of shape (num_blocks + 1, block_size, num_kv_heads, head_dim). Block
`num_blocks` is a scratch block: padded query positions write there, so a write is always one
`index_copy_` with no mask. Attention gathers each sequence's blocks through its block table
into (B, L, kv_heads, D), L = max blocks in the batch x block_size, and runs torch SDPA with a
mask `key_position <= query_position`, which covers causality, padding and chunked context alike
(rows of equal length need no mask: decode attends every key, a fresh prefill is causal).

With `paged_kernels` (attention backend "TRITON_ATTN", the default on CUDA) the metadata carries
per-row query and context lengths instead, and attention reads K/V in place through the block
table: `kernels.paged_attention` for decode, `kernels.paged_prefill` for prefill and chunked
prefill; Triton on CUDA (and under TRITON_INTERPRET=1), their torch twins on CPU. Its shapes do
not depend on the batch's lengths, so decode steps can be captured as CUDA graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Per-step attention inputs, built once by the model runner and shared by every layer."""

    slot_mapping: torch.Tensor  # (B * T,) cache slot of each new token (padding → scratch block)
    block_tables: torch.Tensor | None  # (B, max_blocks) block ids (padding → scratch block)
    num_keys: int  # keys gathered per row: the longest context in the batch
    attn_mask: torch.Tensor | None  # (B, 1, T, num_keys) bool, True = attend; None: see below
    is_causal: bool  # with no mask: causal (prefill of equal fresh rows) or full (equal decode)
    row_start: int = 0  # contiguous layout (block_tables None): the batch is rows [start, start+B)
    # paged kernels: (B,) int32 new tokens and cached tokens (new ones included) per row
    query_lens: torch.Tensor | None = None
    context_lens: torch.Tensor | None = None
    # a verify step (speculative decoding): few queries per row, attended like decode's one,
    # the query heads of a K/V head packed with the row's positions (no K/V repeat)
    packed_queries: bool = False


def build_attention_metadata(
    positions: torch.Tensor,  # (B, T) position of each query token, 0 for padding
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor | None,
    context_lens: list[int],  # per row: tokens cached after this step's writes
    fresh_prefill: bool,  # every row's new tokens start at position 0
    row_start: int = 0,
    paged_kernels: bool = False,  # read K/V in place (needs block tables); see the module doc
) -> AttentionMetadata:
    num_keys = max(context_lens)
    if paged_kernels and block_tables is not None:
        lens = torch.tensor(context_lens, dtype=torch.int32, device=positions.device)
        query_lens = lens - positions[:, 0].to(torch.int32)  # a row's first position = cached
        return AttentionMetadata(slot_mapping, block_tables, num_keys, None, False, row_start,
                                 query_lens, lens)
    uniform = min(context_lens) == num_keys
    if uniform and (positions.shape[1] == 1 or fresh_prefill):
        # equal rows: decode attends every key, a fresh prefill is plain causal (no padding)
        causal = positions.shape[1] > 1
        return AttentionMetadata(slot_mapping, block_tables, num_keys, None, causal, row_start)
    key_pos = torch.arange(num_keys, device=positions.device)
    mask = (key_pos.view(1, 1, -1) <= positions.unsqueeze(-1)).unsqueeze(1)
    return AttentionMetadata(slot_mapping, block_tables, num_keys, mask, False, row_start)


def paged_attention(
    q: torch.Tensor,  # (B, T, H, D)
    k: torch.Tensor,  # (B, T, Hkv, D) new keys, written into the cache first
    v: torch.Tensor,
    k_cache: torch.Tensor,  # (num_blocks + 1, block_size, Hkv, D) or (rows + 1, max_len, Hkv, D)
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
) -> torch.Tensor:
    """Attention output (B, T, H * D) over everything cached for each row, new tokens included."""
    b, t, h, d = q.shape
    kv_heads = k.shape[2]
    k_cache.view(-1, kv_heads, d).index_copy_(0, meta.slot_mapping, k.reshape(-1, kv_heads, d))
    v_cache.view(-1, kv_heads, d).index_copy_(0, meta.slot_mapping, v.reshape(-1, kv_heads, d))
    if meta.context_lens is not None:
        return attend_in_place(q, k_cache, v_cache, meta)
    n = meta.num_keys
    if meta.block_tables is None:  # contiguous layout: the batch's rows are a slice
        rows = slice(meta.row_start, meta.row_start + b)
        keys = k_cache[rows, :n].transpose(1, 2)  # (B, Hkv, n, D)
        values = v_cache[rows, :n].transpose(1, 2)
    else:
        keys = k_cache[meta.block_tables].view(b, -1, kv_heads, d)[:, :n].transpose(1, 2)
        values = v_cache[meta.block_tables].view(b, -1, kv_heads, d)[:, :n].transpose(1, 2)
    if t == 1:
        # decode: the query heads sharing a K/V head become its G "positions" (no K/V repeat);
        # ragged rows keep their (B, 1, 1, n) mask, which broadcasts over heads and positions
        # (in the server rows are ragged: 330 -> 260 us per layer at B = 32, n = 160 on CPU)
        packed = q.reshape(b, kv_heads, h // kv_heads, d)
        out = F.scaled_dot_product_attention(packed, keys, values, attn_mask=meta.attn_mask)
        return out.reshape(b, 1, h * d)
    if meta.packed_queries:
        return _packed_attention(q, keys, values, meta.attn_mask)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        keys,
        values,
        attn_mask=meta.attn_mask,
        is_causal=meta.is_causal,
        enable_gqa=kv_heads != h,
    )
    return out.transpose(1, 2).reshape(b, t, h * d)


def _packed_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """Decode's attention for T queries per row: the G query heads that share a K/V head and
    the T positions become that head's T * G query rows, each position's mask row repeated G
    times; (B, T, H * D)."""
    b, t, h, d = q.shape
    kv_heads = keys.shape[1]
    g = h // kv_heads
    packed = q.reshape(b, t, kv_heads, g, d).permute(0, 2, 1, 3, 4).reshape(b, kv_heads, t * g, d)
    if mask is not None:  # (B, 1, T, n) -> (B, 1, T * G, n)
        mask = mask.unsqueeze(3).expand(b, 1, t, g, mask.shape[-1]).reshape(b, 1, t * g, -1)
    out = F.scaled_dot_product_attention(packed, keys, values, attn_mask=mask)
    return out.reshape(b, kv_heads, t, g, d).permute(0, 2, 1, 3, 4).reshape(b, t, h * d)


def attend_in_place(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
) -> torch.Tensor:
    """(B, T, H * D) from the paged kernels (their launchers: the engine's inputs are valid by
    construction, and the checks would cost ~10 us per layer)."""
    from thinkgate.kernels import paged_attention as decode
    from thinkgate.kernels import paged_prefill as prefill
    from thinkgate.kernels.backend import use_triton

    b, t, h, d = q.shape
    scale = 1.0 / math.sqrt(d)
    on_triton = use_triton(q)
    if t == 1:
        run = decode.paged_decode_attention_triton if on_triton else (
            decode.paged_decode_attention_ref)
        out = run(q[:, 0], k_cache, v_cache, meta.block_tables, meta.context_lens, scale)
        return out.reshape(b, 1, h * d)
    run = prefill.paged_prefill_attention_triton if on_triton else (
        prefill.paged_prefill_attention_ref)
    out = run(q, k_cache, v_cache, meta.block_tables, meta.query_lens, meta.context_lens, scale)
    return out.reshape(b, t, h * d)


class KVCache:
    """K and V tensors for every layer, allocated once (zeros, so masked slots stay finite)."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks + 1, block_size, num_kv_heads, head_dim)
        self.layers = [
            (
                torch.zeros(shape, dtype=dtype, device=device),
                torch.zeros(shape, dtype=dtype, device=device),
            )
            for _ in range(num_layers)
        ]

    @property
    def scratch_block(self) -> int:
        return self.num_blocks

    @staticmethod
    def bytes_per_block(
        num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * block_size * num_kv_heads * head_dim * itemsize
