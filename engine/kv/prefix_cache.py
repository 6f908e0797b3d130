"""Automatic prefix caching: block hashes and a pool of reference-counted, reusable blocks.

A full block of `block_size` tokens is named by a hash chained over every token before it:
`hash(parent's hash, the block's token ids)`, so two sequences that agree on a block's hash agree
on all the tokens up to its end, and the block's K/V is the same for both. (Nothing else changes
the K/V in this engine: no LoRA, no multimodal inputs; an extra key would join the chain here.)

`BlockPool` holds the blocks of one KV store. A block is in use while its reference count is
above zero; at zero it is free, and a free block that carries a hash stays findable (its K/V is
kept) until a fresh block is needed and nothing else is free: then the least recently released
one is evicted and forgets its hash.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence as Seq

_ROOT = b"thinkgate-prefix-v1"


def chain_hash(parent: bytes | None, tokens: Seq[int]) -> bytes:
    """The hash of a block of `tokens` that follows the block hashed `parent` (None: the first)."""
    h = hashlib.blake2b(parent or _ROOT, digest_size=16)
    h.update(array("q", tokens).tobytes())
    return h.digest()


def extend_block_hashes(
    hashes: list[bytes], token_ids: Seq[int], block_size: int, num_blocks: int
) -> list[bytes]:
    """Extend `hashes` (a sequence's, kept between calls) to its first `num_blocks` full blocks."""
    while len(hashes) < num_blocks:
        i = len(hashes)
        block = token_ids[i * block_size : (i + 1) * block_size]
        hashes.append(chain_hash(hashes[-1] if hashes else None, block))
    return hashes


class BlockPool:
    """Block ids 0..num_blocks-1 with reference counts, hashes and LRU eviction of free ones."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.by_hash: dict[bytes, int] = {}
        self.plain_free: deque[int] = deque(range(num_blocks))  # free, no hash
        self.cached_free: OrderedDict[int, None] = OrderedDict()  # free with a hash, LRU first
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        return len(self.plain_free) + len(self.cached_free)

    def match(self, hashes: Seq[bytes]) -> list[int]:
        """The blocks holding the longest run of `hashes` from the first (nothing is taken)."""
        blocks = []
        for h in hashes:
            block = self.by_hash.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def num_reclaimed(self, blocks: Seq[int]) -> int:
        """How many of `blocks` are free now (taking them lowers `num_free`)."""
        return sum(1 for b in blocks if self.ref_counts[b] == 0)

    def acquire(self, block: int) -> None:
        if self.ref_counts[block] == 0:
            self.cached_free.pop(block, None)
        self.ref_counts[block] += 1

    def take(self) -> int:
        """A fresh block (reference count 1, no hash): a plain free one, else the LRU cached one."""
        if self.plain_free:
            block = self.plain_free.popleft()
        elif self.cached_free:
            block, _ = self.cached_free.popitem(last=False)
            h = self.block_hash[block]
            self.block_hash[block] = None
            if h is not None and self.by_hash.get(h) == block:
                del self.by_hash[h]
            self.num_evictions += 1
        else:
            raise RuntimeError("no free KV block (the caller checks num_free first)")
        self.ref_counts[block] = 1
        return block

    def register(self, block: int, h: bytes) -> bool:
        """Make `block` findable by `h`; False when another block already holds `h`."""
        if self.block_hash[block] is not None:
            return self.block_hash[block] == h
        if h in self.by_hash:
            return False
        self.block_hash[block] = h
        self.by_hash[h] = block
        return True

    def release(self, block: int) -> None:
        self.ref_counts[block] -= 1
        assert self.ref_counts[block] >= 0, f"block {block} released more often than taken"
        if self.ref_counts[block] == 0:
            if self.block_hash[block] is None:
                self.plain_free.append(block)
            else:
                self.cached_free[block] = None  # most recently released: evicted last

    def reset(self) -> None:
        """Forget every cached block that no sequence uses."""
        for block in list(self.cached_free):
            h = self.block_hash[block]
            if h is not None:
                self.by_hash.pop(h, None)
            self.block_hash[block] = None
            self.plain_free.append(block)
        self.cached_free.clear()
