"""How much KV cache an engine gets, and in which layout.

The budget is `kv_cache_memory_bytes`, else `gpu_memory_utilization` of the free GPU memory on
CUDA and 512 MiB on CPU. `kv_layout="auto"` takes the contiguous layout (one max_model_len row
per running sequence, slot_cache.py) on CPU with a native model when the budget fits
min(max_num_seqs, 64) rows and no block count is fixed, and the paged layout (blocks and block
tables, kv_cache.py) otherwise. With prefix caching, the contiguous rows leave at least a quarter
of the budget to a pool of cached prefix blocks beside them (row_prefix_store.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.kv.kv_cache import KVCache
from thinkgate.engine.kv.row_prefix_store import RowPrefixStore
from thinkgate.engine.kv.slot_cache import SlotKVCache

CPU_KV_BUDGET = 512 << 20  # bytes, when kv_cache_memory_bytes is not given


@dataclass
class KVAllocation:
    cache: KVCache | SlotKVCache
    num_blocks: int  # blocks the block manager hands out (contiguous: rows x blocks per row)
    row_store: RowPrefixStore | None  # the contiguous layout's cached prefix blocks


def allocate_kv(
    config: EngineConfig,
    shape: tuple[int, int, int] | None,
    dtype: torch.dtype,
    device: torch.device,
    max_model_len: int,
    prefix_caching: bool,
) -> KVAllocation:
    """The cache for a model of `shape` (layers, KV heads, head_dim; None for the transformers
    fallback, which keeps no K/V: a token cache of one layer); ValueError when the budget or
    the block count cannot hold one sequence of max_model_len."""
    native = shape is not None
    num_layers, kv_heads, head_dim = shape if native else (1, 1, 1)
    budget = config.kv_cache_memory_bytes or default_kv_budget(device, config)
    block_size = config.block_size
    blocks_per_seq = -(-max_model_len // block_size)
    per_row = SlotKVCache.bytes_per_row(num_layers, max_model_len, kv_heads, head_dim, dtype)
    rows = min(config.max_num_seqs, budget // per_row)
    layout = config.kv_layout
    if layout == "auto":
        fits = rows >= min(config.max_num_seqs, 64) and config.num_kv_blocks is None
        contiguous = fits and device.type == "cpu" and native and (
            config.attention_backend != "TRITON_ATTN")
        layout = "contiguous" if contiguous else "paged"
    per_block = KVCache.bytes_per_block(num_layers, block_size, kv_heads, head_dim, dtype)
    if layout == "contiguous":
        if rows < 1 or not native:
            raise ValueError(
                "kv_layout 'contiguous' needs a native model and room for one row of "
                f"max_model_len {max_model_len} ({per_row} bytes)"
            )
        pool_blocks = 0
        if prefix_caching:  # cached prefixes get what the rows leave, at least 1/4
            rows = max(1, min(rows, (budget - budget // 4) // per_row))
            pool_blocks = max(blocks_per_seq, (budget - rows * per_row) // per_block)
        cache = SlotKVCache(num_layers, rows, max_model_len, kv_heads, head_dim, dtype, device)
        store = RowPrefixStore(cache, pool_blocks, block_size) if pool_blocks else None
        return KVAllocation(cache, rows * blocks_per_seq, store)  # a row holds a whole sequence
    num_blocks = config.num_kv_blocks
    if num_blocks is None:
        num_blocks = min(budget // per_block, config.max_num_seqs * blocks_per_seq)
    if num_blocks < blocks_per_seq:
        raise ValueError(
            f"num_kv_blocks ({num_blocks}) cannot hold one sequence of max_model_len "
            f"{max_model_len} ({blocks_per_seq} blocks of {block_size})"
        )
    cache = KVCache(num_layers, num_blocks, block_size, kv_heads, head_dim, dtype, device)
    return KVAllocation(cache, num_blocks, None)


def default_kv_budget(device: torch.device, config: EngineConfig) -> int:
    """Bytes for the KV cache when `kv_cache_memory_bytes` is not given."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * config.gpu_memory_utilization)
    return CPU_KV_BUDGET
