"""Cached prefix blocks for the contiguous KV layout, kept in a block pool beside the rows.

A row holds one running sequence and goes when it finishes, so cached K/V needs a place of its
own: per layer K and V of shape (num_blocks, block_size, num_kv_heads, head_dim). `lookup` (at
scheduling) finds the longest run of cached blocks and pins them; `load` (once the sequence has
its row) copies them to the row's first positions, one gather per layer; `save` (after a prefill,
and when a sequence leaves) copies the row's new full blocks into pool blocks, evicting the
least recently used free ones when the pool is full. Copies move K/V only, never compute it.
"""

from __future__ import annotations

import torch
from thinkgate.engine.prefix_cache import BlockPool, extend_block_hashes
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.slot_cache import SlotKVCache


class RowPrefixStore:
    def __init__(self, cache: SlotKVCache, num_blocks: int, block_size: int) -> None:
        self.cache = cache
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        ref = cache.layers[0][0]
        shape = (num_blocks, block_size, *ref.shape[2:])
        self.layers = [
            (
                torch.zeros(shape, dtype=ref.dtype, device=ref.device),
                torch.zeros(shape, dtype=ref.dtype, device=ref.device),
            )
            for _ in cache.layers
        ]

    def lookup(self, seq: Sequence, hashes: list[bytes]) -> int:
        """Pin the cached blocks of `seq`'s longest cached prefix; its length in tokens."""
        blocks = self.pool.match(hashes)
        for block in blocks:
            self.pool.acquire(block)
        seq.prefix_blocks = blocks
        seq.num_saved_blocks = len(blocks)
        return len(blocks) * self.block_size

    def unpin(self, seq: Sequence) -> None:
        for block in seq.prefix_blocks:
            self.pool.release(block)
        seq.prefix_blocks = []

    def load(self, seq: Sequence) -> None:
        """Copy the pinned blocks into positions [0, n) of `seq`'s row, then unpin them."""
        if not seq.prefix_blocks:
            return
        assert seq.kv_row is not None, "load needs the sequence's row"
        ids = torch.tensor(seq.prefix_blocks, dtype=torch.long, device=self.layers[0][0].device)
        n = len(seq.prefix_blocks) * self.block_size
        for (k, v), (pk, pv) in zip(self.cache.layers, self.layers):  # gathered in place
            torch.index_select(pk, 0, ids, out=k[seq.kv_row, :n].unflatten(0, (-1, self.block_size)))
            torch.index_select(pv, 0, ids, out=v[seq.kv_row, :n].unflatten(0, (-1, self.block_size)))
        self.unpin(seq)

    def save(self, seq: Sequence, num_tokens: int) -> None:
        """Store the full blocks among `seq`'s first `num_tokens` positions (their K/V is in its
        row) that the pool lacks, as far as free or evictable blocks allow."""
        row = seq.kv_row
        full = min(num_tokens, self.cache.max_len) // self.block_size
        if row is None or full <= seq.num_saved_blocks:
            return
        hashes = extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size, full)
        sources, targets = [], []
        for i in range(seq.num_saved_blocks, full):
            if hashes[i] in self.pool.by_hash:
                continue
            if self.pool.num_free == 0:
                break
            block = self.pool.take()
            self.pool.register(block, hashes[i])
            sources.append(i)
            targets.append(block)
        seq.num_saved_blocks = full
        if not targets:
            return
        device = self.layers[0][0].device
        src = torch.tensor(sources, dtype=torch.long, device=device)
        dst = torch.tensor(targets, dtype=torch.long, device=device)
        bs = self.block_size
        for (k, v), (pk, pv) in zip(self.cache.layers, self.layers):
            pk.index_copy_(0, dst, k[row, : full * bs].unflatten(0, (full, bs)).index_select(0, src))
            pv.index_copy_(0, dst, v[row, : full * bs].unflatten(0, (full, bs)).index_select(0, src))
        for block in targets:
            self.pool.release(block)  # free but cached: findable until evicted
