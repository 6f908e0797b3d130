"""Decode steps replayed as CUDA graphs, one per batch-size bucket.

A decode batch of n rows is padded to the smallest capture size >= n (vLLM's default list: 1,
2, 4, then multiples of 8 up to 512, cut at max_num_seqs). Every input lives in a static
buffer sized for the largest bucket; a step copies its ids, positions, slots, context lengths
and block tables in, then replays the bucket's graph (captured on its first use: one eager
warm-up on a side stream, which also compiles the Triton kernels, then the capture), and
computes logits eagerly from the first n rows of the bucket's static hidden states (one lm_head
launch; static logits per bucket would hold ~2.6 GB at max_num_seqs 256 and V = 151,936).
Padding rows decode token 0 at position 0 with one key, writing their K/V into the scratch
block; their hidden states are never read. Buckets are captured lazily, so the first step of
each size pays its capture (tens of ms); all share one memory pool. Only the columns of the block tables a step uses are copied: a kernel reads a row's first
ceil(context_len / block_size) entries, and stale entries further right are valid block ids.

The graphs need attention whose shapes do not depend on the batch's lengths: the paged kernels
(`AttentionMetadata.context_lens`). Without `capture` (CPU, and the tests) `run` executes the
same padded forward eagerly, so the buffer logic is tested where no GPU is.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable

import torch
from thinkgate.engine.kv.kv_cache import AttentionMetadata
from thinkgate.engine.sequence import Sequence

logger = logging.getLogger(__name__)

MAX_CAPTURE_SIZE = 512


def capture_sizes(max_num_seqs: int) -> list[int]:
    """The buckets: 1, 2, 4, 8, 16, ... 512 up to the first one >= max_num_seqs."""
    if not isinstance(max_num_seqs, int) or max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be a positive int, got {max_num_seqs!r}")
    sizes = [1, 2, 4, *range(8, MAX_CAPTURE_SIZE + 1, 8)]
    return sizes[: bisect.bisect_left(sizes, min(max_num_seqs, MAX_CAPTURE_SIZE)) + 1]


class DecodeGraphs:
    """Static decode inputs and, with `capture`, one CUDA graph per bucket."""

    def __init__(
        self,
        model: torch.nn.Module,
        kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
        sizes: list[int],
        max_blocks_per_seq: int,
        block_size: int,
        scratch_block: int,
        device: torch.device,
        capture: bool,
    ) -> None:
        self.model, self.kv_layers, self.sizes = model, kv_layers, sizes
        self.block_size, self.scratch_block = block_size, scratch_block
        self.capture = capture
        most = sizes[-1]
        # rows: input ids, positions, slots, context lengths; padding defaults as described above
        self.step_inputs = torch.zeros(4, most, dtype=torch.long, device=device)  # (4, B)
        self.block_tables = torch.full((most, max_blocks_per_seq), scratch_block,
                                       dtype=torch.long, device=device)  # (B, max_blocks)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.hidden: dict[int, torch.Tensor] = {}  # (size, hidden) per captured bucket
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    @property
    def max_batch(self) -> int:
        return self.sizes[-1]

    def bucket(self, n: int) -> int:
        """The smallest capture size >= n (n <= max_batch)."""
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"batch of {n} rows outside [1, {self.max_batch}]")
        return self.sizes[bisect.bisect_left(self.sizes, n)]

    def run(self, seqs: list[Sequence], slot: Callable[[Sequence, int], int]) -> torch.Tensor:
        """Logits (n, V) float32 of a decode step."""
        size = self.fill(seqs, slot)
        if not self.capture:
            hidden = self.forward(size)
        else:
            if size not in self.graphs:
                self._capture(size)
            self.graphs[size].replay()
            hidden = self.hidden[size]
        return self.model.compute_logits(hidden[: len(seqs)])

    def fill(self, seqs: list[Sequence], slot: Callable[[Sequence, int], int]) -> int:
        """Copy the step's inputs into the static buffers, padded to its bucket; the bucket."""
        n = len(seqs)
        size = self.bucket(n)
        pad = size - n
        positions = [seq.num_tokens - 1 for seq in seqs]
        scratch_slot = self.scratch_block * self.block_size
        host = torch.tensor(
            [seq.token_ids[-1] for seq in seqs] + [0] * pad
            + positions + [0] * pad
            + [slot(seq, p) for seq, p in zip(seqs, positions)] + [scratch_slot] * pad
            + [p + 1 for p in positions] + [1] * pad,
            dtype=torch.long,
        ).view(4, size)
        self.step_inputs[:, :size].copy_(host, non_blocking=True)
        width = max(len(seq.block_table) for seq in seqs)
        tables = [seq.block_table + [self.scratch_block] * (width - len(seq.block_table))
                  for seq in seqs] + [[self.scratch_block] * width] * pad
        self.block_tables[:size, :width].copy_(torch.tensor(tables, dtype=torch.long),
                                               non_blocking=True)
        return size

    def forward(self, size: int) -> torch.Tensor:
        """The padded decode forward of bucket `size` on the static buffers: (size, hidden)."""
        ids, positions, slots, lens = self.step_inputs[:, :size]
        meta = AttentionMetadata(
            slot_mapping=slots,
            block_tables=self.block_tables[:size],
            num_keys=self.block_tables.shape[1] * self.block_size,
            attn_mask=None,
            is_causal=False,
            query_lens=None,
            context_lens=lens,
        )
        hidden = self.model(ids.view(size, 1), positions.view(size, 1), meta, self.kv_layers)
        return hidden[:, -1]

    def _capture(self, size: int) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: Triton compiles, cuBLAS picks its kernels
            self.forward(size)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.hidden[size] = self.forward(size)
        self.graphs[size] = graph
        logger.info("captured the decode graph of batch size %d", size)


def attention_plan(
    backend: str | None, enforce_eager: bool, device: torch.device, paged_layout: bool,
    native: bool, block_size: int, head_dim: int,
) -> tuple[bool, bool]:
    """(paged kernels, CUDA graphs) for an engine; ValueError for a backend that cannot run.

    The paged kernels need block tables (the paged layout) and a native model; on CUDA the
    decode kernel's tiles need block_size and head_dim >= 16. Graphs need the paged kernels,
    CUDA and no `enforce_eager`."""
    fits = paged_layout and native and (device.type != "cuda" or min(block_size, head_dim) >= 16)
    if backend == "TRITON_ATTN" and not fits:
        raise ValueError(
            f"attention_backend 'TRITON_ATTN' needs kv_layout 'paged' and a native model"
            f"{', and block_size and head_dim >= 16 on CUDA' if device.type == 'cuda' else ''}"
            f" (got paged={paged_layout}, native={native}, block_size {block_size}, "
            f"head_dim {head_dim})")
    paged = backend == "TRITON_ATTN" or (backend is None and device.type == "cuda" and fits)
    return paged, paged and device.type == "cuda" and not enforce_eager
