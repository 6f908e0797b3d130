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

Why this is exact at any temperature: a draft here is one fixed token per position, and the
row keeps a position's token only if its own sample equals it; so each kept token is a sample
of the target distribution given the tokens before it, the same as without a draft (for a
deterministic draft this is what rejection sampling reduces to: accept d with probability
p(d), else draw from p without d). Greedy rows give the tokens of plain decoding; seeded rows
give the same tokens too, up to float rounding between the ragged and the one-token forward.

Rows that do not draft (this first slice): a row with logits processors (penalties, logit
bias, min_tokens: their counts move with each kept token), a token trace, a completion plan, a
row still thinking, and every row of a step where some
row is thinking (the device reasoning gate maps one row to one slot). Accepted drafts become
the row's `forced_ids` (scheduler.py appends them before the sampled token, under the stop
rules), so stop strings, stop ids and max_tokens inside a draft end the row where they fall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from thinkgate.engine.config import SpeculativeConfig
from thinkgate.engine.core.draft_policy import RowAcceptance, StepCosts, best_width
from thinkgate.engine.core.sampler import Sampler, SamplerOutput, make_logprob_entry
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.structured_output import GateInputs

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
        self.proposer = NgramProposer(config.num_speculative_tokens, config.prompt_lookup_max,
                                      config.prompt_lookup_min)
        self.words = (vocab_size + 31) // 32
        self.num_drafts = 0  # vLLM's spec_decode_num_drafts, _num_draft_tokens, _num_accepted
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.costs = StepCosts()
        self._skipped = 0  # steps in a row whose drafts did not run although they might gain
        self._constrained = False  # whether a row of the next step is under a grammar

    def stats(self) -> dict[str, int]:
        return {"spec_decode_num_drafts": self.num_drafts,
                "spec_decode_num_draft_tokens": self.num_draft_tokens,
                "spec_decode_num_accepted_tokens": self.num_accepted_tokens}

    # ---- after a step: drafts for the next one ----
    def propose(self, seqs: list[Sequence]) -> None:
        """Each eligible row's proposal, scored (draft_policy.py); the drafts worth verifying
        become `draft_ids` if the step's expected gain covers the verify step's extra cost,
        the rest stay as shadows."""
        wanted: list[tuple[Sequence, RowAcceptance, list[int], int]] = []
        forced = 0
        self._constrained = any(  # the next step's costs are timed and weighed apart
            seq.structured_state is not None and seq.structured_state.constrained
            and not seq.is_finished for seq in seqs)
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
            if proposal:
                wanted.append((seq, state, proposal, state.worth(proposal)))
        if not wanted:
            return
        rows = sum(not seq.is_finished for seq in seqs)
        gains = [state.gains(n) for _, state, _, n in wanted]
        constrained = self._constrained
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
    def verify(self, logits: torch.Tensor, draft_logits: dict[int, torch.Tensor],
               seqs: list[Sequence], gate: GateInputs | None, sampler: Sampler,
               decode: Any, jump_forward: Any = None) -> SamplerOutput:
        """One token per row as the sampler would give it, plus each row's kept draft ids in
        its `forced_ids` (accepted by its grammar; their logprob entries already recorded).
        `logits` (B, V): each drafted row's logits at its last real token; `draft_logits`:
        row -> (k, V) logits after each draft id. `jump_forward(seq)`: whether jump-forward
        writes the text the row's grammar forces (the engine's own test)."""
        if gate is not None and (gate.reasoning is not None or gate.banned_rows):
            for seq in seqs:  # a thinking row: the device gate maps a row to a slot; no drafts
                seq.draft_ids = []
            return sampler(logits, seqs, gate)
        base = gate.bitmask if gate is not None else None
        base_rows = gate.grammar_rows if gate is not None else None
        extras: list[torch.Tensor | None] = []
        for seq in seqs:  # each draft cut where its grammar ends it, with the masks along it
            structured, extra = seq.structured_state, None
            if seq.draft_ids and structured is not None and structured.constrained:
                jumps = jump_forward is not None and jump_forward(seq)
                seq.draft_ids, extra = structured.masks_along(seq.draft_ids, self.words, jumps)
            extras.append(extra)
        pieces, positions, masks, applies, spans = [], [], [], [], []
        masked = base is not None or any(e is not None for e in extras)
        for row, (seq, extra) in enumerate(zip(seqs, extras)):
            draft = seq.draft_ids
            spans.append((len(positions), len(draft)))
            pieces.append(logits[row:row + 1])
            if draft:  # rows that draft have no logits processors (`_may_draft`)
                pieces.append(draft_logits[row][:len(draft)])
                positions.extend(_Position(seq.params, seq.seed, seq.num_output_tokens + j,
                                           seq.plain_temperature) for j in range(len(draft) + 1))
            else:  # the row itself: its processors apply as in any step
                positions.append(seq)
            if masked:
                applies_here = extra is not None or (
                    base is not None and (base_rows is None or bool(base_rows[row])))
                applies.extend([applies_here] * (len(draft) + 1))
                masks.append(base[row:row + 1].cpu() if base is not None else self._allowed(1))
                if draft:
                    masks.append(extra if extra is not None else self._allowed(len(draft)))
        expanded = torch.cat(pieces)
        wide_gate = None
        if masked and any(applies):
            device = logits.device
            wide_gate = GateInputs(bitmask=torch.cat(masks).to(device),
                                   grammar_rows=torch.tensor(applies, device=device))
        sampled = sampler(expanded, positions, wide_gate)  # type: ignore[arg-type]
        token_ids: list[int] = []
        entries: list[Any] = []
        for seq, (start, k) in zip(seqs, spans):
            got = sampled.token_ids[start:start + k + 1]
            kept = 0
            while kept < k and got[kept] == seq.draft_ids[kept]:
                kept += 1
            if k:  # (a row without a draft keeps its jump-forward ids, if any)
                if seq.draft_state is not None:
                    seq.draft_state.note(kept, kept + (kept < k))
                self.num_drafts += 1
                self.num_draft_tokens += k
                self.num_accepted_tokens += kept
                self._keep(seq, seq.draft_ids[:kept], sampled.logprobs[start:start + kept],
                           decode)
            token_ids.append(got[kept])
            entries.append(sampled.logprobs[start + kept])
        return SamplerOutput(token_ids, entries)

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

    def _allowed(self, rows: int) -> torch.Tensor:
        return torch.full((rows, self.words), _ALL_ALLOWED, dtype=torch.int32)


def _may_draft(seq: Sequence) -> bool:
    """Whether this row drafts at all (the module doc's list)."""
    if seq.has_logits_processors or seq.trace is not None:
        return False
    gate = seq.reasoning_state
    if gate is not None and not gate.answering:
        return False
    row = seq.structured_state
    if row is None:
        return True
    return row.planner is None and row.error is None and not row.is_terminated
