"""Cached prefix blocks for the contiguous KV layout, kept in a block pool beside the rows.

A row holds one running sequence and goes when it finishes, so cached K/V needs a place of its
own: per layer K and V of shape (num_blocks, block_size, num_kv_heads, head_dim). `lookup` (at
scheduling) finds the longest run of cached blocks and pins them; `load` (once the sequence has
its row) copies them to the row's first positions, one gather per layer; `save` (after a prefill,
and when a sequence leaves) copies the row's new full blocks into pool blocks, evicting the
least recently used free ones when the pool is full. Copies move K/V only, never compute it.

A freed row keeps its K/V, so `row_hashes[row]` records which blocks its first positions hold
(the hashes of a leading run of full blocks, as `load` put them there or `save` found them);
`load` copies only the blocks after the run the row already has. Agents resending one system
prompt one request after another land on the same row and copy nothing (the demo model's
1,232-token prefix: 0.74 ms of copies per request before). Every way a row's positions change
keeps the record true: a sequence writes only after its loaded prefix (`load` sets the record
to that prefix, or empties it when nothing was loaded), and a row moved by
`SlotKVCache.release` takes the record of the row it was copied from (`moved`).
"""

from __future__ import annotations

import torch
from thinkgate.engine.kv.prefix_cache import BlockPool, extend_block_hashes
from thinkgate.engine.kv.slot_cache import SlotKVCache
from thinkgate.engine.sequence import Sequence


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
        self.row_hashes: list[list[bytes]] = [[] for _ in range(cache.num_rows + 1)]
        cache.moved = self.moved
        self.num_loaded_blocks = 0  # blocks `load` copied into rows (not those already there)

    def lookup(self, seq: Sequence, hashes: list[bytes]) -> int:
        """Pin the cached blocks of `seq`'s longest cached prefix; its length in tokens. A
        prefix shorter than a third of the tokens after it is not used: the masked prefill of a
        long rest over a short cached prefix costs more than the plain causal prefill of the
        whole prompt (1,600 tokens, two threads: 208 cached 59.6 ms, 400 cached 53.5 ms,
        none 50.3 ms, 800 cached 29.0 ms; benchmarks/RESULTS.md)."""
        blocks = self.pool.match(hashes)
        cached = len(blocks) * self.block_size
        if 3 * cached < seq.num_tokens - cached:
            blocks = []
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
        """Copy the pinned blocks into positions [0, n) of `seq`'s row (those the row does not
        hold already), then unpin them. Called before every prefill step of `seq`."""
        row = seq.kv_row
        if not seq.prefix_blocks:
            if row is not None:  # the sequence writes from its cached count on: trust nothing
                del self.row_hashes[row][seq.num_cached_tokens // self.block_size:]
            return
        assert row is not None, "load needs the sequence's row"
        want = [self.pool.block_hash[b] for b in seq.prefix_blocks]
        have = self.row_hashes[row]
        same = 0
        while same < min(len(have), len(want)) and have[same] == want[same]:
            same += 1
        if same < len(want):
            blocks = seq.prefix_blocks[same:]
            self.num_loaded_blocks += len(blocks)
            ids = torch.tensor(blocks, dtype=torch.long, device=self.layers[0][0].device)
            bs = self.block_size
            start, n = same * bs, len(want) * bs
            for (k, v), (pk, pv) in zip(self.cache.layers, self.layers):  # gathered in place
                torch.index_select(pk, 0, ids, out=k[row, start:n].unflatten(0, (-1, bs)))
                torch.index_select(pv, 0, ids, out=v[row, start:n].unflatten(0, (-1, bs)))
        self.row_hashes[row] = want[: seq.num_cached_tokens // self.block_size]
        self.unpin(seq)

    def moved(self, source: int, target: int) -> None:
        """`SlotKVCache.release` copied row `source`'s written positions into row `target`."""
        self.row_hashes[target] = list(self.row_hashes[source])

    def save(self, seq: Sequence, num_tokens: int) -> None:
        """Store the full blocks among `seq`'s first `num_tokens` positions (their K/V is in its
        row) that the pool lacks, as far as free or evictable blocks allow."""
        row = seq.kv_row
        full = min(num_tokens, self.cache.max_len) // self.block_size
        if row is None or full <= seq.num_saved_blocks:
            return
        hashes = extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size, full)
        self.row_hashes[row] = hashes[:full]  # the row holds these blocks' K/V now
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
