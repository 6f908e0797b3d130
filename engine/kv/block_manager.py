"""KV block allocation: one block table per sequence over a pool of reference-counted blocks.

With prefix caching (`enable_prefix_caching`, on by default) a sequence that is scheduled for
its (first or recomputed) prefill starts with the longest run of cached full blocks matching its
tokens, at most all but its last token, so every prefill computes at least one token:

- paged layout: the matched blocks join its block table (shared, reference-counted) and each
  full block it fills is registered under its chained hash at once, so even a sequence later in
  the same prefill batch reads it (attention writes every row's new K/V before any row reads).
  Freed blocks keep their K/V and hash until a fresh block is needed (LRU eviction).
- contiguous layout (`row_store`): blocks here only count memory; cached prefixes live in the
  `RowPrefixStore`, copied into the sequence's row before its prefill and out of it after. A
  sequence whose prefix another sequence of the same prefill batch is computing waits for the
  next step (when it is cached) if that saves at least `DEFER_MIN_BLOCKS` blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from thinkgate.engine.kv.prefix_cache import BlockPool, extend_block_hashes
from thinkgate.engine.sequence import Sequence

if TYPE_CHECKING:
    from thinkgate.engine.kv.row_prefix_store import RowPrefixStore

DEFER_MIN_BLOCKS = 4


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        on_free: Callable[[Sequence], None] | None = None,
        enable_prefix_caching: bool = False,
        row_store: RowPrefixStore | None = None,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.on_free = on_free  # the contiguous KV layout releases the sequence's row here
        self.pool = BlockPool(num_blocks)
        self.row_store = row_store if enable_prefix_caching else None
        self.share_blocks = enable_prefix_caching and row_store is None
        self.enable_prefix_caching = enable_prefix_caching
        self.num_queries = 0  # prompt tokens looked up (vLLM's prefix_cache_queries)
        self.num_hits = 0  # of those, found cached (prefix_cache_hits)
        self._pending: set[bytes] = set()  # contiguous: blocks this prefill batch computes

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def _missing(self, seq: Sequence) -> int:
        # per sequence per decode step: plain lens, no properties (seq.num_scheduled_tokens)
        needed = (len(seq.token_ids) + len(seq.forced_ids) + len(seq.draft_ids)
                  + self.block_size - 1) // self.block_size
        return max(0, needed - len(seq.block_table))

    def _prefix_hashes(self, seq: Sequence) -> list[bytes]:
        """Hashes of the full blocks a prefill may reuse: none may hold the last token."""
        limit = (seq.num_tokens - 1) // self.block_size
        return extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size, limit)[:limit]

    def num_cached_prefix(self, seq: Sequence) -> int:
        """Tokens of `seq` a prefill scheduled now would find cached (no side effects)."""
        if seq.block_table or not self.enable_prefix_caching:
            return seq.num_cached_tokens
        pool = self.pool if self.row_store is None else self.row_store.pool
        return len(pool.match(self._prefix_hashes(seq))) * self.block_size

    def begin_prefill(self) -> None:
        """Called before the scheduler picks a prefill batch."""
        self._pending.clear()

    def can_allocate(self, seq: Sequence) -> bool:
        """Whether every token of `seq` (prompt and any recomputed output) fits now."""
        missing = self._missing(seq)
        if seq.block_table or not self.enable_prefix_caching:
            return missing <= self.pool.num_free
        if self.share_blocks:
            hits = self.pool.match(self._prefix_hashes(seq))
            return missing - len(hits) + self.pool.num_reclaimed(hits) <= self.pool.num_free
        if missing > self.pool.num_free:
            return False
        return not self._pending or self._deferred_blocks(seq) < DEFER_MIN_BLOCKS

    def _deferred_blocks(self, seq: Sequence) -> int:
        hashes = self._prefix_hashes(seq)
        assert self.row_store is not None
        start = len(self.row_store.pool.match(hashes))
        run = 0
        for h in hashes[start:]:
            if h not in self._pending:
                break
            run += 1
        return run

    def allocate(self, seq: Sequence) -> None:
        if not seq.block_table:  # a prefill from scratch: reuse what is cached
            self._reuse_prefix(seq)
        missing = self._missing(seq)
        if missing == 0 and not self.share_blocks:  # most decode steps
            return
        for _ in range(missing):
            seq.block_table.append(self.pool.take())
        if self.share_blocks:
            self._register(seq)

    def _reuse_prefix(self, seq: Sequence) -> None:
        if not self.enable_prefix_caching:
            return
        hashes = self._prefix_hashes(seq)
        if self.share_blocks:
            hits = self.pool.match(hashes)
            for block in hits:
                self.pool.acquire(block)
            seq.block_table.extend(hits)
            seq.num_registered_blocks = len(hits)
            seq.num_cached_tokens = len(hits) * self.block_size
        else:
            assert self.row_store is not None
            seq.num_cached_tokens = self.row_store.lookup(seq, hashes)
            full = seq.num_tokens // self.block_size
            extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size, full)
            self._pending.update(seq.block_hashes[seq.num_cached_tokens // self.block_size:full])
        if seq.num_preemptions == 0:
            seq.num_prompt_cached_tokens = seq.num_cached_tokens
        self.num_queries += seq.num_tokens
        self.num_hits += seq.num_cached_tokens

    def _register(self, seq: Sequence) -> None:
        """Make the full blocks of `seq` findable (their K/V is written by this step at latest)."""
        full = seq.num_tokens // self.block_size
        if seq.num_registered_blocks >= full:
            return
        hashes = extend_block_hashes(seq.block_hashes, seq.token_ids, self.block_size, full)
        for i in range(seq.num_registered_blocks, full):
            self.pool.register(seq.block_table[i], hashes[i])
        seq.num_registered_blocks = full

    def can_append(self, seq: Sequence) -> bool:
        """Whether the next decode step of `seq` (its last token's K/V) fits now."""
        missing = self._missing(seq)
        return missing == 0 or missing <= self.pool.num_free

    def free(self, seq: Sequence) -> None:
        if self.row_store is not None:
            self.row_store.save(seq, seq.num_cached_tokens)  # its K/V so far, before the row goes
            self.row_store.unpin(seq)
        for block in reversed(seq.block_table):  # the tail is evicted before the head
            self.pool.release(block)
        seq.block_table = []
        seq.num_cached_tokens = 0
        seq.num_registered_blocks = 0
        if self.on_free is not None:
            self.on_free(seq)

    def reset_prefix_cache(self) -> None:
        """Forget every cached block no running sequence holds."""
        self.pool.reset()
        if self.row_store is not None:
            self.row_store.pool.reset()

    def stats(self) -> dict[str, int]:
        return {"prefix_cache_queries": self.num_queries, "prefix_cache_hits": self.num_hits}
