"""Speculative decoding with n-gram drafts (vLLM's `ngram` method): several tokens per forward,
each one sampled under its own grammar mask, so never an invalid one and never another
distribution.

After a step, an eligible row whose last tokens repeat an earlier n-gram (longest first, from
`prompt_lookup_max` down to `prompt_lookup_min` tokens) gets a proposal: the `k` tokens that
followed the latest earlier occurrence (`NgramProposer`). Whether and how much of it runs is
draft_policy.py's call: each row's acceptance is scored on every proposal (one that does not
run is scored against the tokens the row writes next), a row drafts the leading ids likely to
be kept, and the step verifies only at the draft width whose expected tokens per unit of time
beat a plain step's, by the verify and plain steps the engine has timed. A verify step's
forward computes the drafts with each row's last token (rows without a draft ride along with
their one token), attending like a decode step (model/compiled_verify.py), so the logits at
every draft position come out of one pass. `Speculator.verify` then samples *every* position with the
row's own sampler settings, its seed and the step index the token would have without drafts,
under the grammar mask of the state the draft leads to (`RequestGrammar.masks_along`: the
row's matcher accepts the draft token by token, fills a mask after each, with the repeated-key
checks of free-form objects on a copy of the key tracker, and rolls back). The row keeps the draft's prefix that
the samples reproduce plus the first sample that differs (or one more after the whole draft).
Per verify step that is: one lm_head call over every position, row by row (the runner's
`verify_starts`), the masks written in place into one (N, W) bitmask, one sampler call over
the N positions, and `kernels.accept_drafts` over rows x positions (on the device one kernel
and one (2, B) read back; on CPU its loop on the host ids the sampler read).

Why this is exact at any temperature: a draft here is one fixed token per position, and the
row keeps a position's token only if its own sample equals it; so each kept token is a sample
of the target distribution given the tokens before it, the same as without a draft (for a
deterministic draft this is what rejection sampling reduces to: accept d with probability
p(d), else draw from p without d). Greedy rows give the tokens of plain decoding; seeded rows
give the same tokens too, up to float rounding between the ragged and the one-token forward.

Rows that still think draft too (spec_gate.py): a thinking row's draft stops before its first
end-marker id and before the id after which a thinking budget would force the marker
(`RowGate.draft_room`), so each of its positions thinks, unforced, in the slot state of the
step's start; every position reads its row's slot of the device gate (no grammar while
thinking, unless the constraint applies in reasoning; the stop and implicit-end ids banned
while a grammar waits), the sampled token after a kept prefix may be `</think>`, and the gate
is advanced over the kept ids and then the sampled one, ending where plain decoding leaves it.
Thinking and answering rows draft in the same step.

Rows that do not draft: a row with logits processors (penalties, logit bias, min_tokens: their
counts move with each kept token), a token trace, a completion plan. Accepted drafts become
the row's `forced_ids` (scheduler.py appends them before the sampled token, under the stop
rules), so stop strings, stop ids and max_tokens inside a draft end the row where they fall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from thinkgate.engine.config import SpeculativeConfig
from thinkgate.engine.core.draft_policy import RowAcceptance, StepCosts, best_width
from thinkgate.engine.core.sampler import (
    Sampler,
    SamplerOutput,
    forced_logprob_entries,
    make_logprob_entry,
)
from thinkgate.engine.core.spec_gate import advance_gate, spread_gate
from thinkgate.engine.core.suffix_drafts import SuffixProposer
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.structured_output import GateInputs
from thinkgate.kernels import accept_drafts
from thinkgate.kernels.backend import use_triton
from thinkgate.kernels.spec_accept import accept_drafts_host

_ALL_ALLOWED = -1  # an int32 bitmask word with every bit set
# a step whose drafts have some expected gain runs them after this many skipped steps anyway,
# so the verify step's time is measured again (it may have been timed on a busy machine)
REFRESH_STEPS = 16


class NgramProposer:
    """Drafts from a sequence's own tokens: the tokens after the latest earlier occurrence of
    its last n tokens, n from `high` down to `low`. Each sequence keeps an index of its n-grams
    (`seq.ngram_index`: n-gram -> where its latest occurrence ends), extended as tokens come,
    so a proposal costs a few dict lookups."""

    def __init__(self, k: int, high: int, low: int) -> None:
        self.k, self.high, self.low = k, high, low

    def propose(self, seq: Sequence, limit: int) -> list[int]:
        """At most min(k, limit) draft ids for `seq` (empty when no n-gram repeats)."""
        if limit <= 0:
            return []
        tokens = seq.token_ids
        index, done = seq.ngram_index
        end = len(tokens)
        # index the n-grams ending before the current last token (never the suffix itself)
        for stop in range(max(done, self.low), end):
            for n in range(self.low, min(self.high, stop) + 1):
                index[tuple(tokens[stop - n:stop])] = stop
        seq.ngram_index = (index, max(done, end))
        for n in range(min(self.high, end - 1), self.low - 1, -1):
            after = index.get(tuple(tokens[end - n:]))
            if after is not None:
                return tokens[after:after + min(self.k, limit)]
        return []

    def add_output(self, tokens: list[int]) -> None:
        """A finished request's output: prompt lookup drafts from the row's own tokens only."""


@dataclass
class _Position:
    """One draft position as the sampler sees a row: the row's settings at step `step`."""

    params: Any
    seed: int
    num_output_tokens: int
    plain_temperature: float | None
    has_logits_processors: bool = False


class Speculator:
    def __init__(self, config: SpeculativeConfig, vocab_size: int) -> None:
        self.config = config
        self.proposer: NgramProposer | SuffixProposer
        if config.method == "suffix":
            self.proposer = SuffixProposer(
                config.num_speculative_tokens, config.suffix_decoding_max_tree_depth,
                config.suffix_decoding_max_cached_requests,
                config.suffix_decoding_max_spec_factor, config.suffix_decoding_min_token_prob)
        else:
            self.proposer = NgramProposer(config.num_speculative_tokens,
                                          config.prompt_lookup_max, config.prompt_lookup_min)
        self.words = (vocab_size + 31) // 32
        self.num_drafts = 0  # vLLM's spec_decode_num_drafts, _num_draft_tokens, _num_accepted
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        # per finished sample that verified a draft (`finish_request`): their count, and the
        # sums of their acceptance rates and mean accepted lengths (/metrics divides)
        self.num_requests = 0
        self.acceptance_rate_sum = 0.0
        self.accepted_length_sum = 0.0
        self.costs = StepCosts()
        self._skipped = 0  # steps in a row whose drafts did not run although they might gain
        self._constrained = False  # whether a row of the next step is under a grammar
        self._wide: torch.Tensor | None = None  # host bitmask of a verify step's positions

    def stats(self) -> dict[str, float]:
        return {"spec_decode_num_drafts": self.num_drafts,
                "spec_decode_num_draft_tokens": self.num_draft_tokens,
                "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
                "spec_decode_num_requests": self.num_requests,
                "spec_decode_request_acceptance_rate_sum": self.acceptance_rate_sum,
                "spec_decode_request_mean_accepted_length_sum": self.accepted_length_sum}

    def finish_request(self, seqs: list[Sequence]) -> None:
        """A finished request's outputs go to the proposer (the suffix method caches them);
        its acceptance, counted once per sample that verified a draft: its acceptance rate
        (draft ids kept / verified) and mean accepted length (tokens per verified draft, the
        sampled one included: vLLM's 1 + accepted / drafts)."""
        for seq in seqs:
            self.proposer.add_output(seq.output_token_ids)
            drafts, tokens, kept = seq.spec_counts
            if drafts:
                self.num_requests += 1
                self.acceptance_rate_sum += kept / tokens if tokens else 0.0
                self.accepted_length_sum += 1 + kept / drafts

    # ---- after a step: drafts for the next one ----
    def propose(self, seqs: list[Sequence]) -> None:
        """Each eligible row's proposal, scored (draft_policy.py); the drafts worth verifying
        become `draft_ids` if the step's expected gain covers the verify step's extra cost,
        the rest stay as shadows."""
        wanted: list[tuple[Sequence, RowAcceptance, list[int], int]] = []
        forced = 0
        self._constrained = constrained = any(  # the next step's costs are timed apart
            seq.structured_state is not None and seq.structured_state.constrained
            and not seq.is_finished for seq in seqs)
        rows = sum(not seq.is_finished for seq in seqs)
        cut = self.costs.min_chance(rows, constrained)
        for seq in seqs:
            seq.draft_ids = []
            forced += len(seq.forced_ids)
            if seq.is_finished or seq.forced_ids or not _may_draft(seq):
                continue
            state = seq.draft_state
            if state is None:
                state = seq.draft_state = RowAcceptance()
            state.settle(seq.token_ids)
            limit = seq.max_total_tokens - seq.num_tokens - 1  # room for the sampled token
            proposal = self.proposer.propose(seq, limit)
            if proposal and seq.reasoning_state is not None:  # thinking: up to the gate's cuts
                proposal = proposal[:seq.reasoning_state.draft_room(proposal)]
            if proposal:
                wanted.append((seq, state, proposal, state.worth(proposal, cut)))
        if not wanted:
            return
        gains = [state.gains(n) for _, state, _, n in wanted]
        width, pays = best_width(rows + forced, gains,
                                 lambda w: self.costs.ratio(rows, w, constrained))
        if not pays:  # the best width still runs now and then, to be timed again
            width = width if self._skipped >= REFRESH_STEPS else 0
        self._skipped = 0 if width else self._skipped + 1
        for seq, state, proposal, n in wanted:
            if width and n:
                seq.draft_ids = proposal[:min(n, width)]
            else:
                state.shadow, state.shadow_at = proposal, seq.num_tokens

    def note_step(self, rows: int, width: int, seconds: float) -> None:
        """A decode step's time and its widest draft (0: none), for the costs the next
        proposals weigh against."""
        self.costs.note(rows, width, seconds, self._constrained)

    # ---- after the forward: sample every draft position ----
    def verify(self, logits: torch.Tensor, starts: list[int], seqs: list[Sequence],
               gate: GateInputs | None, sampler: Sampler, decode: Any,
               jump_forward: Any = None) -> SamplerOutput:
        """One token per row as the sampler would give it, plus each row's kept draft ids in
        its `forced_ids` (accepted by its grammar; their logprob entries already recorded).
        `logits` (N, V): row r's positions from `starts[r]`, its last real token's then one
        after each of its draft ids (model_runner.py). `jump_forward(seq)`: whether
        jump-forward writes the text the row's grammar forces (the engine's own test).

        Every position is sampled in one call under its own mask; acceptance runs over rows x
        positions at once (`kernels.accept_drafts`: on the device the step reads back one
        (2, B) tensor; on CPU the ids are host values and its loop runs on lists)."""
        num = logits.shape[0]
        spans = [len(seq.draft_ids) + 1 for seq in seqs]  # each row's positions
        wide_gate, cuts = self._masks(seqs, starts, num, gate, jump_forward)
        if gate is not None and (gate.reasoning is not None or gate.banned_rows):
            wide_gate = spread_gate(gate, wide_gate, starts, spans)  # each position on its slot
        positions: list[Any] = []
        drafts: list[int] = []  # (N,): the draft id each position's sample is compared with
        for seq, span, cut in zip(seqs, spans, cuts):
            if span > 1:  # rows that draft have no logits processors (`_may_draft`)
                positions.extend(_Position(seq.params, seq.seed, seq.num_output_tokens + j,
                                           seq.plain_temperature) for j in range(span))
                drafts.extend(seq.draft_ids)  # (cut by the grammar: `cut` ids)
                drafts.extend([-1] * (span - cut))
            else:  # the row itself: its processors apply as in any step
                positions.append(seq)
                drafts.append(-1)
        device = logits.device
        want = [(row, seq) for row, seq in enumerate(seqs) if seq.params.logprobs is not None]
        raw = None
        if want:  # the raw distribution's rows, before sampling masks them (sampler.py)
            index = [i for row, seq in want
                     for i in range(starts[row], starts[row] + len(seq.draft_ids) + 1)]
            raw = logits[torch.tensor(index, device=device)]
        sampled = sampler.sample_ids(logits, positions, wide_gate)  # type: ignore[arg-type]
        b = len(seqs)
        if use_triton(sampled):  # on the device: one kernel, one (2, B) read back
            host = torch.tensor(drafts + starts + cuts, dtype=torch.int64).to(device)
            accepted, token_ids = accept_drafts(
                sampled, host[:num], host[num:num + b], host[num + b:],
                self.config.num_speculative_tokens, check=False).tolist()
        else:  # CPU: the ids are host values already; the twin's loop on lists
            accepted, token_ids = accept_drafts_host(sampled.tolist(), drafts, starts, cuts)
        entries: list[Any] = [None] * b
        if raw is not None:
            entries = self._logprobs(raw, want, accepted, token_ids, entries)
        reasoning = None
        if gate is not None and gate.reasoning is not None:  # over kept ids, then sampled ones
            token_ids, reasoning = advance_gate(gate, seqs, accepted, token_ids)
        for row, seq in enumerate(seqs):
            k, kept = len(seq.draft_ids), accepted[row]
            if not k:  # (a row without a draft keeps its jump-forward ids, if any)
                continue
            if seq.draft_state is not None:
                seq.draft_state.note(kept, kept + (kept < cuts[row]))
            self.num_drafts += 1
            self.num_draft_tokens += cuts[row]
            self.num_accepted_tokens += kept
            seq.spec_counts[0] += 1
            seq.spec_counts[1] += cuts[row]
            seq.spec_counts[2] += kept
            kept_entries = entries[row][0] if entries[row] is not None else []
            self._keep(seq, seq.draft_ids[:kept], kept_entries, decode)
        return SamplerOutput(token_ids, [e[1] if e is not None else None for e in entries],
                             reasoning)

    def _masks(self, seqs: list[Sequence], starts: list[int], num: int, gate: GateInputs | None,
               jump_forward: Any) -> tuple[GateInputs | None, list[int]]:
        """The (N, W) bitmask of every position (each row's step mask at its first position,
        the masks along its draft after it, written in place by the grammar) and each row's
        draft length after its grammar's cut."""
        cuts = [len(seq.draft_ids) for seq in seqs]
        base = gate.bitmask if gate is not None else None
        if base is None and not any(_constrained(seq) for seq in seqs if seq.draft_ids):
            return None, cuts
        wide = self._wide_buffer(num)
        applies: list[bool] = []
        base_rows = gate.grammar_rows.tolist() if gate is not None and (
            gate.grammar_rows is not None) else None
        if base is not None:  # (host arrays: a list index costs ~1 us, a torch.tensor ~10-25)
            wide.numpy()[starts] = base.cpu().numpy()
        for row, seq in enumerate(seqs):
            k, first = len(seq.draft_ids), starts[row]
            applies_here = base is not None and (base_rows is None or bool(base_rows[row]))
            if k and _constrained(seq):
                jumps = jump_forward is not None and jump_forward(seq)
                structured = seq.structured_state
                seq.draft_ids, _ = structured.masks_along(  # type: ignore[union-attr]
                    seq.draft_ids, self.words, jumps, wide[first + 1:first + 1 + k])
                cuts[row] = len(seq.draft_ids)
                applies_here = True
            applies.extend([applies_here] * (k + 1))
        if not any(applies):
            return None, cuts
        device = gate.bitmask.device if base is not None else torch.device("cpu")
        rows = None if all(applies) else torch.from_numpy(np.array(applies)).to(device)
        return GateInputs(bitmask=wide.to(device), grammar_rows=rows), cuts

    def _wide_buffer(self, num: int) -> torch.Tensor:
        """Rows [0, num) of a reused (N, W) host bitmask, every bit set."""
        if self._wide is None or self._wide.shape[0] < num:
            self._wide = torch.empty((max(num, 64), self.words), dtype=torch.int32)
        wide = self._wide[:num]
        wide.fill_(_ALL_ALLOWED)
        return wide

    @staticmethod
    def _logprobs(raw: torch.Tensor, want: list[tuple[int, Sequence]], accepted: list[int],
                  token_ids: list[int], entries: list[Any]) -> list[Any]:
        """Per row that asks: (entries of its kept draft ids, entry of its next token), from
        `raw` (the raw logits of those rows' positions, row after row)."""
        at = 0
        for row, seq in want:
            kept = accepted[row]
            ids = seq.draft_ids[:kept] + [max(token_ids[row], 0)]
            got = forced_logprob_entries(raw[at:at + kept + 1], ids, seq.params.logprobs or 0)
            entries[row] = (got[:kept], got[kept])
            at += len(seq.draft_ids) + 1
        return entries

    def _keep(self, seq: Sequence, kept: list[int], entries: list[Any], decode: Any) -> None:
        """The kept draft ids become `forced_ids`: the grammar accepts them now (its matcher
        then sees the step's sampled token as usual), their logprob entries are recorded."""
        seq.draft_ids = []
        structured = seq.structured_state
        for token in kept:
            if structured is not None and not structured.accept(token):
                seq.force_finish = ("abort", f"structured output error: {structured.error}")
                break
        seq.forced_ids = kept
        if seq.logprobs is not None:
            for token, entry in zip(kept, entries):
                seq.logprobs.append(make_logprob_entry(token, entry, decode))
                seq.cumulative_logprob += entry[0]



def _constrained(seq: Sequence) -> bool:
    structured = seq.structured_state
    return structured is not None and structured.constrained


def _may_draft(seq: Sequence) -> bool:
    """Whether this row drafts at all (the module doc's list)."""
    if seq.has_logits_processors or seq.trace is not None:
        return False
    row = seq.structured_state
    if row is None:
        return True
    return row.planner is None and row.error is None and not row.is_terminated
