"""KV block allocation: a free list of fixed-size blocks, one block table per sequence."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from thinkgate.engine.sequence import Sequence


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        on_free: Callable[[Sequence], None] | None = None,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.on_free = on_free  # the contiguous KV layout releases the sequence's row here
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def _missing(self, seq: Sequence) -> int:
        needed = (seq.num_scheduled_tokens + self.block_size - 1) // self.block_size
        return max(0, needed - len(seq.block_table))

    def can_allocate(self, seq: Sequence) -> bool:
        """Whether every token of `seq` (prompt and any recomputed output) fits now."""
        return self._missing(seq) <= len(self.free_blocks)

    def allocate(self, seq: Sequence) -> None:
        for _ in range(self._missing(seq)):
            seq.block_table.append(self.free_blocks.popleft())

    def can_append(self, seq: Sequence) -> bool:
        """Whether the next decode step of `seq` (its last token's K/V) fits now."""
        return self._missing(seq) <= len(self.free_blocks)

    def free(self, seq: Sequence) -> None:
        self.free_blocks.extend(seq.block_table)
        seq.block_table = []
        seq.num_cached_tokens = 0
        if self.on_free is not None:
            self.on_free(seq)
