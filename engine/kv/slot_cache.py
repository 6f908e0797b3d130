"""Contiguous per-sequence K/V: the CPU fast path that needs no gather.

Per layer K and V of shape (num_rows + 1, max_len, num_kv_heads, head_dim); row `num_rows` is
scratch for padding writes. Running sequences always occupy rows [0, R) (a prefill batch takes
the next rows in batch order), so a step's attention reads a plain slice `k[start:start + B]`
instead of gathering blocks. When a sequence leaves, the sequence in the last row moves into
its row (a copy of that one sequence's cached tokens), keeping the rows packed.

Every row can hold `max_len` tokens, so this layout trades memory for speed; the engine uses it
on CPU when the KV budget fits enough rows, and the paged layout otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from thinkgate.engine.sequence import Sequence


class SlotKVCache:
    def __init__(
        self,
        num_layers: int,
        num_rows: int,
        max_len: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device,
    ) -> None:
        self.num_rows = num_rows
        self.max_len = max_len
        shape = (num_rows + 1, max_len, num_kv_heads, head_dim)
        self.layers = [
            (
                torch.zeros(shape, dtype=dtype, device=device),
                torch.zeros(shape, dtype=dtype, device=device),
            )
            for _ in range(num_layers)
        ]
        self.rows: list[Sequence] = []  # rows[i].kv_row == i
        self.moved: Callable[[int, int], None] | None = None  # (source, target) after a move

    @property
    def scratch_row(self) -> int:
        return self.num_rows

    def assign(self, seq: Sequence) -> int:
        assert seq.kv_row is None and len(self.rows) < self.num_rows
        seq.kv_row = len(self.rows)
        self.rows.append(seq)
        return seq.kv_row

    def release(self, seq: Sequence) -> None:
        """Free `seq`'s row; the last row's sequence moves into it."""
        row = seq.kv_row
        if row is None:
            return
        seq.kv_row = None
        last = self.rows.pop()
        if last is seq:
            return
        n = min(last.num_tokens, self.max_len)  # covers every position written so far
        for k, v in self.layers:
            k[row, :n].copy_(k[last.kv_row, :n])
            v[row, :n].copy_(v[last.kv_row, :n])
        if self.moved is not None:
            self.moved(last.kv_row, row)  # type: ignore[arg-type]
        last.kv_row = row
        self.rows[row] = last

    @staticmethod
    def bytes_per_row(
        num_layers: int, max_len: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * max_len * num_kv_heads * head_dim * itemsize
