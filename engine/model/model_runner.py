"""Build one step's input tensors from the scheduled sequences and run the model to logits.

Prefill rows are right-padded to the longest new-token count; decode rows have one token
each, unless a row carries jump-forward ids (`seq.forced_ids`): that decode step is built like a
prefill (ragged rows, padded), and the logits at the forced positions of rows that want
logprobs are kept in `forced_logits` for the engine to record. Padding tokens write their K/V into the cache's scratch block and their outputs are
never read. The transformers fallback gets whole sequences instead (it has no cache).
"""

from __future__ import annotations

import torch
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.kv.kv_cache import KVCache, build_attention_metadata
from thinkgate.engine.kv.row_prefix_store import RowPrefixStore
from thinkgate.engine.kv.slot_cache import SlotKVCache
from thinkgate.engine.model.compiled_decode import CompiledDecode, compiler_available
from thinkgate.engine.model.compiled_prefill import CompiledPrefill
from thinkgate.engine.model.compiled_verify import CompiledVerify
from thinkgate.engine.model.cuda_graphs import DecodeGraphs, attention_plan, capture_sizes
from thinkgate.engine.model.long_forward import (
    PREFILL_TOKENS,
    fast_fp32_keeps_accuracy,
    wide_forward,
)
from thinkgate.engine.model.model_loader import LoadedModel
from thinkgate.engine.sequence import ScheduledBatch, Sequence


class ModelRunner:
    def __init__(
        self,
        loaded: LoadedModel,
        kv_cache: KVCache | SlotKVCache,
        device: torch.device,
        row_store: RowPrefixStore | None = None,
    ) -> None:
        self.model = loaded.model
        self.arch = loaded.arch  # None for the transformers fallback
        self.kv_cache = kv_cache
        self.row_store = row_store  # contiguous layout with prefix caching
        self.device = device
        self.contiguous = isinstance(kv_cache, SlotKVCache)
        if self.contiguous:  # a "block" is a whole row; slots are row * max_len + position
            self.block_size = kv_cache.max_len
            self.scratch_block = kv_cache.scratch_row
        else:
            self.block_size = kv_cache.block_size
            self.scratch_block = kv_cache.scratch_block
        self.full_sequence = bool(getattr(self.model, "needs_full_sequence", False))
        self.paged_kernels = False  # attention reads K/V in place (kv_cache.attend_in_place)
        self.graphs: DecodeGraphs | None = None  # decode buckets (cuda_graphs.py), else eager
        self.compiled_decode: CompiledDecode | None = None  # CPU decode steps (compiled_decode.py)
        self.compiled_prefill: CompiledPrefill | None = None  # masked prefills (compiled_prefill.py)
        self.compiled_verify: CompiledVerify | None = None  # drafted steps (compiled_verify.py)
        # jump-forward: batch row -> (k, V) float32 logits predicting each of its k forced ids
        # (only rows whose request asks for logprobs), from the last forward
        self.forced_logits: dict[int, torch.Tensor] = {}
        # speculative decoding: on a verify step, where each row's positions start in the
        # (N, V) logits `forward` returns (its last token, then one after each draft id); None
        # on other steps
        self.verify_starts: list[int] | None = None
        self.logprobs_of_forced = not self.full_sequence  # the fallback keeps last logits only
        # eager forwards of at least `PREFILL_TOKENS` new tokens (long_forward.py) run on this
        # many torch threads when more than the steady count (set by the engine core for small
        # models); None keeps torch's count for every step
        self.prefill_threads: int | None = None
        # ... and through oneDNN's fast fp32 path where it keeps fp32 accuracy on this CPU
        self.fast_fp32 = (device.type == "cpu" and loaded.dtype == torch.float32
                          and fast_fp32_keeps_accuracy())
        prepare = getattr(self.model, "prepare_inference", None)
        if prepare is not None:
            prepare()

    def plan_attention(self, config: EngineConfig, max_num_seqs: int, max_model_len: int) -> None:
        """Paged kernels and CUDA-graph decode where they run (cuda_graphs.attention_plan)."""
        arch = self.arch
        paged, graphs = attention_plan(
            config.attention_backend, config.enforce_eager, self.device,
            isinstance(self.kv_cache, KVCache), arch is not None and not self.full_sequence,
            config.block_size, arch.head_dim if arch else 0)
        self.paged_kernels = paged
        if graphs:
            self.graphs = DecodeGraphs(
                self.model, self.kv_cache.layers, capture_sizes(max_num_seqs),
                -(-max_model_len // config.block_size), config.block_size,
                self.kv_cache.scratch_block, self.device, capture=True)

    def compile_steps(self, enforce_eager: bool, max_num_seqs: int, max_model_len: int,
                      speculative: bool = False) -> None:
        """Compile the CPU decode step (compiled_decode.py), the contiguous layout's masked
        prefills (compiled_prefill.py) and, with `speculative`, verify steps in either layout
        (compiled_verify.py), where they apply. Compiled code is specialized to torch's thread
        count: set it before this."""
        if (self.compiled_decode is not None or self.device.type != "cpu" or enforce_eager
                or self.arch is None
                or self.arch.moe is not None  # routing's per-expert groups: eager
                or self.full_sequence or self.paged_kernels or not compiler_available()):
            return
        layers = self.kv_cache.layers
        compiled = CompiledDecode(self.model)
        if compiled.warm_up(layers, self.block_size, self.scratch_block, max_num_seqs,
                            max_model_len, not self.contiguous):
            self.compiled_decode = compiled
        if self.contiguous:
            prefill = CompiledPrefill(self.model)
            if prefill.warm_up(layers, self.block_size, self.scratch_block,
                               self.kv_cache.num_rows):
                self.compiled_prefill = prefill
                prefill.warm_up_fresh(layers, self.block_size, self.scratch_block,
                                      self.prefill_threads or torch.get_num_threads(),
                                      self.fast_fp32)
        verify = CompiledVerify(self.model) if speculative else None
        rows = self.kv_cache.num_rows if self.contiguous else 0  # (paged: not read)
        if verify is not None and verify.warm_up(layers, self.block_size, self.scratch_block,
                                                 rows, paged=not self.contiguous):
            self.compiled_verify = verify

    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits (B, V) float32 for the next token of every scheduled sequence; on a verify
        step (rows with draft ids) (N, V), each row's positions from `verify_starts[row]`."""
        self.forced_logits = {}
        self.verify_starts = None
        if self.full_sequence:
            return self._forward_full(batch.seqs)
        ragged = not batch.is_prefill and any(seq.forced_ids or seq.draft_ids
                                              for seq in batch.seqs)
        if self.graphs is not None and not batch.is_prefill and not ragged and (
                len(batch.seqs) <= self.graphs.max_batch):
            return self.graphs.run(batch.seqs, self._slot)
        row_start = batch.seqs[0].kv_row if self.contiguous else 0
        store = self.row_store if batch.is_prefill else None
        if store is not None:
            for seq in batch.seqs:
                store.load(seq)  # cached prefix blocks into the row, before the forward reads it
        drafted = ragged and any(seq.draft_ids for seq in batch.seqs)  # a verify step
        gather = None
        if batch.is_prefill or ragged:
            input_ids, positions, slots, last, gather = self._prepare_prefill(batch.seqs,
                                                                              drafted)
        else:
            input_ids, positions, slots, last = self._prepare_decode(batch.seqs)
        block_tables = None if self.contiguous else self._block_tables(batch.seqs)
        if batch.is_prefill or ragged:
            context_lens = [seq.num_scheduled_tokens for seq in batch.seqs]
        else:  # a plain decode step: no forced ids anywhere
            context_lens = [len(seq.token_ids) for seq in batch.seqs]
        fresh = batch.is_prefill and all(seq.num_cached_tokens == 0 for seq in batch.seqs)
        meta = build_attention_metadata(
            positions, slots, block_tables, context_lens, fresh, row_start, self.paged_kernels
        )
        if drafted and meta.context_lens is None:
            meta.packed_queries = True  # (built for this step: a replace cost ~20 us)
        run = self.model
        if self.compiled_decode is not None and not (batch.is_prefill or ragged):
            run = self.compiled_decode
        elif self.compiled_verify is not None and CompiledVerify.applies(input_ids, meta):
            run = self.compiled_verify
        elif self.compiled_prefill is not None and CompiledPrefill.applies(input_ids, meta):
            run = self.compiled_prefill
        elif (self.compiled_prefill is not None and self.compiled_prefill.fresh_threads
              and CompiledPrefill.applies_fresh(input_ids, meta)):
            run = self.compiled_prefill.fresh
        # compiled steps run at the thread count they were compiled at (Dynamo recompiles on
        # another): the decode and masked graphs at the steady count, the long fresh graph at
        # its own; the fp32 path is read at run time (no recompile)
        threads = self.prefill_threads if run is self.model else None
        if self.compiled_prefill is not None and run is self.compiled_prefill.fresh:
            threads = self.compiled_prefill.fresh_threads
        if (batch.is_prefill or ragged) and (threads or self.fast_fp32) and (
                input_ids.numel() >= PREFILL_TOKENS):
            hidden = wide_forward(run, threads, self.fast_fp32, input_ids, positions, meta,
                                  self.kv_cache.layers)
        else:
            hidden = run(input_ids, positions, meta, self.kv_cache.layers)  # (B, T, hidden)
        if ragged or batch.is_prefill:
            self._keep_forced_logits(batch.seqs, hidden, last)
        if store is not None:
            for seq in batch.seqs:
                store.save(seq, seq.num_tokens)  # every token's K/V is in the row now
        if gather is not None:  # every position of every row, in one lm_head call
            return self.model.compute_logits(hidden.reshape(-1, hidden.shape[-1])[gather])
        if last is not None:
            hidden = hidden[torch.arange(len(batch.seqs), device=self.device), last]
        else:
            hidden = hidden[:, -1]
        return self.model.compute_logits(hidden)

    def _keep_forced_logits(
        self, seqs: list[Sequence], hidden: torch.Tensor, last: torch.Tensor | None
    ) -> None:
        if last is None:
            return
        for row, seq in enumerate(seqs):
            k = len(seq.forced_ids)
            if k and seq.params.logprobs is not None:
                end = int(last[row])  # the position predicting the next sampled token
                self.forced_logits[row] = self.model.compute_logits(hidden[row, end - k : end])

    def _slot(self, seq: Sequence, position: int) -> int:
        if self.contiguous:
            return seq.kv_row * self.block_size + position  # type: ignore[operator]
        return (
            seq.block_table[position // self.block_size] * self.block_size
            + position % self.block_size
        )

    def order(self, batch: ScheduledBatch) -> None:
        """Contiguous layout: give new sequences rows and put the batch in row order (before
        anything indexes the batch by row)."""
        cache = self.kv_cache
        if not isinstance(cache, SlotKVCache) or self.full_sequence:
            return
        for seq in batch.seqs:
            if seq.kv_row is None:
                cache.assign(seq)
        batch.seqs.sort(key=lambda seq: seq.kv_row)  # type: ignore[arg-type, return-value]
        first = batch.seqs[0].kv_row
        assert batch.seqs[-1].kv_row == first + len(batch.seqs) - 1, "rows must be packed"

    def _prepare_prefill(
        self, seqs: list[Sequence], drafted: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(ids, positions, slots, last, gather): `last` the position predicting each row's
        next token (a draft's ids come after it); with `drafted`, `gather` indexes the flat
        (B * width) hidden rows of every row's last token and draft positions, row by row
        (`verify_starts` says where each row's begin), else None. One host-to-device copy."""
        lengths = [seq.num_scheduled_tokens - seq.num_cached_tokens for seq in seqs]
        width = max(lengths)
        scratch = self.scratch_block * self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        last: list[int] = []
        gather: list[int] = []
        starts: list[int] = []
        for row, (seq, length) in enumerate(zip(seqs, lengths)):
            start, end = seq.num_cached_tokens, seq.num_scheduled_tokens
            pad = width - length
            ids.extend(seq.token_ids[start:] + seq.forced_ids + seq.draft_ids + [0] * pad)
            positions.extend(range(start, end))
            positions.extend([0] * pad)
            if self.contiguous:  # a row's slots are consecutive
                base = seq.kv_row * self.block_size  # type: ignore[operator]
                slots.extend(range(base + start, base + end))
            else:
                slots.extend(self._slot(seq, p) for p in range(start, end))
            slots.extend([scratch] * pad)
            k = len(seq.draft_ids)
            last.append(length - 1 - k)
            if drafted:
                starts.append(len(gather))
                at = row * width + length - 1 - k
                gather.extend(range(at, at + k + 1))
        if drafted:
            self.verify_starts = starts
        n, b = len(ids), len(seqs)
        packed = self._tensor(ids + positions + slots + last + gather)
        shape = (b, width)
        return (packed[:n].view(shape), packed[n:2 * n].view(shape), packed[2 * n:3 * n],
                packed[3 * n:3 * n + b], packed[3 * n + b:] if drafted else None)

    def _prepare_decode(
        self, seqs: list[Sequence]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        ids = [seq.token_ids[-1] for seq in seqs]
        positions = [seq.num_tokens - 1 for seq in seqs]
        slots = [self._slot(seq, p) for seq, p in zip(seqs, positions)]
        packed = self._tensor(ids + positions + slots).view(3, -1)  # one host→device copy
        return packed[0].view(-1, 1), packed[1].view(-1, 1), packed[2], None

    def _block_tables(self, seqs: list[Sequence]) -> torch.Tensor:
        width = max(len(seq.block_table) for seq in seqs)
        if self.compiled_decode is not None:  # one compiled graph for every width: never 1
            width = max(width + 1, 2)  # wide, and longer than any row's keys (compiled_decode)
        scratch = [self.kv_cache.scratch_block]
        rows = [seq.block_table + scratch * (width - len(seq.block_table)) for seq in seqs]
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def _forward_full(self, seqs: list[Sequence]) -> torch.Tensor:
        width = max(seq.num_scheduled_tokens for seq in seqs)
        rows = [seq.token_ids + seq.forced_ids + [0] * (width - seq.num_scheduled_tokens)
                for seq in seqs]
        input_ids = torch.tensor(rows, dtype=torch.long, device=self.device)
        lengths = self._tensor([seq.num_scheduled_tokens for seq in seqs])
        return self.model.last_logits(input_ids, lengths)
