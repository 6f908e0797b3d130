"""The paged KV cache and attention over it.

Layout per layer: K and V of shape (num_blocks + 1, block_size, num_kv_heads, head_dim). Block
`num_blocks` is a scratch block: padded query positions write there, so a write is always one
`index_copy_` with no mask. Attention gathers each sequence's blocks through its block table
into (B, L, kv_heads, D), L = max blocks in the batch x block_size, and runs torch SDPA with a
mask `key_position <= query_position`, which covers causality, padding and chunked context alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Per-step attention inputs, built once by the model runner and shared by every layer."""

    slot_mapping: torch.Tensor  # (B * T,) cache slot of each new token (padding → scratch block)
    block_tables: torch.Tensor  # (B, max_blocks) block ids (padding → scratch block)
    attn_mask: torch.Tensor  # (B, 1, T, L) bool, True = attend


def build_attention_metadata(
    positions: torch.Tensor,  # (B, T) position of each query token, 0 for padding
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
) -> AttentionMetadata:
    num_keys = block_tables.shape[1] * block_size
    key_pos = torch.arange(num_keys, device=positions.device)
    mask = (key_pos.view(1, 1, -1) <= positions.unsqueeze(-1)).unsqueeze(1)
    return AttentionMetadata(slot_mapping, block_tables, mask)


def paged_attention(
    q: torch.Tensor,  # (B, T, H, D)
    k: torch.Tensor,  # (B, T, Hkv, D) new keys, written into the cache first
    v: torch.Tensor,
    k_cache: torch.Tensor,  # (num_blocks + 1, block_size, Hkv, D)
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
) -> torch.Tensor:
    """Attention output (B, T, H * D) over everything cached for each row, new tokens included."""
    b, t, h, d = q.shape
    kv_heads = k.shape[2]
    k_cache.view(-1, kv_heads, d).index_copy_(0, meta.slot_mapping, k.reshape(-1, kv_heads, d))
    v_cache.view(-1, kv_heads, d).index_copy_(0, meta.slot_mapping, v.reshape(-1, kv_heads, d))
    keys = k_cache[meta.block_tables].view(b, -1, kv_heads, d).transpose(1, 2)  # (B, Hkv, L, D)
    values = v_cache[meta.block_tables].view(b, -1, kv_heads, d).transpose(1, 2)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=meta.attn_mask, enable_gqa=kv_heads != h
    )
    return out.transpose(1, 2).reshape(b, t, h * d)


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
