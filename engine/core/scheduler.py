"""Continuous batching with three verbs: `add`, `schedule`, `postprocess` (plus `abort`).

Each step is either a prefill batch (new or preempted sequences, FIFO, within the limits on
running sequences, tokens per step and free KV blocks) or a decode batch of every running
sequence. With `prefill_delay_steps` > 0 (default 0), while sequences decode, a few new
arrivals wait up to that many decode steps so that they are prefilled together (a server's
clients arrive one by one, and a prefill step per arrival stalls every running row for a
forward pass); a queue of at least a quarter of the running batch, an idle engine and
preempted sequences are prefilled at once. Not on by default: on the loaded 2-core machine
it has not yet shown a gain (the waiting rows' slots sit idle meanwhile). When a decode step runs out of blocks, the most recently started sequence is
preempted by recompute: its blocks are freed and it goes back to the front of the waiting
queue with all its tokens, to be prefilled again later (its outputs are kept). A prefill
computes only the tokens after a sequence's cached prefix (block_manager.py), and only those
count against the tokens per step. A sequence with jump-forward ids (`forced_ids`, from the
grammar) computes them with its next forward; in `postprocess` they are appended before that
step's sampled token, under the same stop rules.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from thinkgate.engine.kv.block_manager import BlockManager
from thinkgate.engine.sequence import ScheduledBatch, Sequence, SequenceStatus


class Scheduler:
    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        eos_token_ids: set[int],
        on_preempt: Callable[[Sequence], None] | None = None,
        prefill_delay_steps: int = 0,
    ) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.eos_token_ids = eos_token_ids
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.num_preemptions = 0
        self.on_preempt = on_preempt  # per-sequence device state to give back (reasoning slots)
        self.prefill_delay_steps = prefill_delay_steps
        self.num_decode_steps = 0

    def add(self, seq: Sequence) -> None:
        seq.waiting_since = self.num_decode_steps
        self.waiting.append(seq)

    def schedule(self) -> ScheduledBatch | None:
        if self._prefill_due():
            prefill = self._schedule_prefill()
            if prefill:
                return ScheduledBatch(prefill, is_prefill=True)
        decode = self._schedule_decode()
        if decode:
            self.num_decode_steps += 1
            return ScheduledBatch(decode, is_prefill=False)
        prefill = self._schedule_prefill()
        return ScheduledBatch(prefill, is_prefill=True) if prefill else None

    def _prefill_due(self) -> bool:
        if not self.waiting:
            return False
        if not self.running or len(self.waiting) * 4 >= len(self.running):
            return True
        return self.num_decode_steps - self.waiting[0].waiting_since >= self.prefill_delay_steps

    def _schedule_prefill(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        num_tokens = 0
        self.block_manager.begin_prefill()
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            new_tokens = seq.num_tokens - self.block_manager.num_cached_prefix(seq)
            if scheduled and num_tokens + new_tokens > self.max_num_batched_tokens:
                break
            if not self.block_manager.can_allocate(seq):
                break
            self.block_manager.allocate(seq)
            num_tokens += seq.num_tokens - seq.num_cached_tokens  # cached prefixes are free
            seq.status = SequenceStatus.RUNNING
            self.waiting.popleft()
            self.running.append(seq)
            scheduled.append(seq)
        return scheduled

    def _schedule_decode(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        while self.running:
            seq = self.running.popleft()
            if seq.draft_ids and not self.block_manager.can_append(seq):
                seq.draft_ids = []  # a draft never costs a preemption
            while not self.block_manager.can_append(seq):
                if self.running:
                    self._preempt(self.running.pop())
                else:
                    self._preempt(seq)
                    break
            else:
                self.block_manager.allocate(seq)
                scheduled.append(seq)
        self.running.extend(scheduled)
        return scheduled

    def _preempt(self, seq: Sequence) -> None:
        seq.draft_ids = []
        self.block_manager.free(seq)
        if self.on_preempt is not None:
            self.on_preempt(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        seq.waiting_since = -(1 << 30)  # never delayed
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int]) -> list[Sequence]:
        """Append each sampled token, apply the stop rules, free finished sequences' blocks."""
        finished = []
        for seq, token in zip(seqs, token_ids):
            seq.detokenizer.start_step()
            # a stop rule inside the jump-forward text ends the sequence there (`token` dropped)
            stopped = self._append_forced(seq) if seq.forced_ids else False
            if stopped:
                pass
            elif token < 0:  # the sampler found no allowed token (e.g. a grammar dead end)
                seq.finish("abort", "no allowed token")
            else:
                seq.num_cached_tokens = seq.num_tokens  # K/V of every token before `token`
                seq.token_ids.append(token)
            if seq.is_finished or self._check_stop(seq, token):
                seq.detokenizer.flush()
                finished.append(seq)
        if len(finished) > 1 and finished[0].kv_row is not None:
            # contiguous layout: a freed row takes the last row's sequence (a copy of its K/V);
            # freeing from the last row down copies none when the batch's tail rows finish
            finished.sort(key=lambda seq: seq.kv_row, reverse=True)  # type: ignore[arg-type, return-value]
        for seq in finished:
            self.block_manager.free(seq)
            self.running.remove(seq)
        return finished

    def _append_forced(self, seq: Sequence) -> bool:
        """Append the jump-forward ids this step computed, with the stop rules; True when one
        of them ended the sequence."""
        forced, seq.forced_ids = seq.forced_ids, []
        for token in forced:
            seq.token_ids.append(token)
            if self._check_stop(seq, token, forced=True):
                return True
        return False

    def _check_stop(self, seq: Sequence, token: int, forced: bool = False) -> bool:
        params = seq.params
        if seq.force_finish is not None and not forced:  # it belongs to the sampled token
            seq.detokenizer.step(token)
            seq.finish(*seq.force_finish)
            return True
        may_stop = seq.num_output_tokens > params.min_tokens
        if may_stop:
            if token in params.stop_token_ids:  # type: ignore[operator]
                if params.include_stop_str_in_output:
                    seq.detokenizer.step(token)
                seq.finish("stop", token)
                return True
            if not params.ignore_eos and token in self.eos_token_ids:
                seq.finish("stop")
                return True
        stop = seq.detokenizer.step(token, match_stop=may_stop)
        if stop is not None:
            seq.finish("stop", stop)
            return True
        if seq.num_tokens >= seq.max_total_tokens:
            seq.finish("length")
            return True
        return False

    def abort(self, seqs: Iterable[Sequence]) -> None:
        """Drop sequences wherever they are and free everything they hold."""
        for seq in seqs:
            if seq.status is SequenceStatus.WAITING and seq in self.waiting:
                self.waiting.remove(seq)
            elif seq.status is SequenceStatus.RUNNING and seq in self.running:
                self.running.remove(seq)
            self.block_manager.free(seq)
            if not seq.is_finished:
                seq.finish("abort")
