"""Turn a step's logits into token ids: penalties, logit bias, min_tokens, the gated grammar.

The per-request logits processors (repetition/presence/frequency penalties, logit_bias, the
min_tokens ban on stop tokens, the stop ban of rows whose grammar waits for the end of thinking)
run here in torch on the rows that use them. Then one `kernels.sample` call does the rest: the
reasoning gate, the grammar bitmask, forced end-marker ids, temperature, top-k/top-p/min-p,
greedy or seeded Gumbel-max. With a reasoning state, `kernels.update_reasoning_state` advances
every row on the device, and the ids and the rows' states come back in one transfer (the
step's one sync). Logprobs, when asked, are those of the raw model distribution (vLLM's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from thinkgate.engine.outputs import Logprob
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.structured_output import GateInputs
from thinkgate.kernels import SamplingTensors, sample, update_reasoning_state
from thinkgate.kernels.backend import use_triton
from thinkgate.kernels.cpu.sample_plain import PLAIN_ROWS, sample_plain


@dataclass
class SamplerOutput:
    token_ids: list[int]
    # per row: None, or (sampled logprob, sampled rank, [(id, logprob), ...] top-k)
    logprobs: list[tuple[float, int, list[tuple[int, float]]] | None]
    # with a reasoning state: each row's slot after the step, (thinking, num_reasoning_tokens,
    # progress, start_id)
    reasoning: tuple[list[int], ...] | None = None


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: set[int], device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self.device = device

    def _sample_plain(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int] | None:
        """`kernels.sample_plain` when every row has only a temperature (no logprobs,
        processors or top-k/top-p/min-p): the same ids as `kernels.sample`, fewer calls."""
        plain = [seq.plain_temperature for seq in seqs]
        if None in plain:
            return None
        temperatures = cast("list[float]", plain)
        if not any(temperatures):  # all greedy: seeds and steps are not read
            return sample_plain(logits, temperatures, (), ())
        if len(seqs) > PLAIN_ROWS and not all(temperatures):
            return None  # greedy and sampled rows mixed: the dense route sorts them
        return sample_plain(logits, temperatures, [seq.seed for seq in seqs],
                            [seq.num_output_tokens for seq in seqs])

    def __call__(
        self,
        logits: torch.Tensor,
        seqs: list[Sequence],
        gate: GateInputs | None = None,
    ) -> SamplerOutput:
        """Sample one token per row of `logits` (B, V) float32; `logits` is modified in place.

        `gate`'s bitmask, grammar_rows, reasoning state and slots go to `kernels.sample`
        unchanged (see its docstring); its banned ids are set to -inf on its banned rows."""
        if (logits.device.type == "cpu" and not use_triton(logits)
                and (gate is None or gate.is_empty())):
            ids = self._sample_plain(logits, seqs)
            if ids is not None:
                return SamplerOutput(ids, [None] * len(seqs))
        want_logprobs = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
        raw_logprobs = torch.log_softmax(logits[want_logprobs], dim=-1) if want_logprobs else None
        self._apply_processors(logits, seqs)
        gate = gate or GateInputs()
        _ban(logits, gate)
        token_ids = self._sample(logits, seqs, gate)
        token_list, reasoning = advance_reasoning(gate, token_ids)
        out: list[tuple[float, int, list[tuple[int, float]]] | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            rows = torch.tensor(want_logprobs, device=logits.device)
            chosen = token_ids[rows].clamp(min=0)
            chosen_lp = raw_logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)  # (R,)
            ranks = (raw_logprobs > chosen_lp.unsqueeze(1)).sum(1) + 1
            k = max(seqs[i].params.logprobs or 0 for i in want_logprobs)
            top_lp, top_ids = (
                raw_logprobs.topk(k, dim=-1) if k else (chosen_lp[:, None][:, :0],) * 2
            )
            chosen_lp, ranks = chosen_lp.tolist(), ranks.tolist()
            top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
            for j, i in enumerate(want_logprobs):
                n = seqs[i].params.logprobs or 0
                out[i] = (chosen_lp[j], ranks[j], list(zip(top_ids[j][:n], top_lp[j][:n])))
        return SamplerOutput(token_list, out, reasoning)

    def sample_ids(self, logits: torch.Tensor, seqs: list[Sequence],
                   gate: GateInputs | None = None) -> torch.Tensor:
        """The ids `__call__` samples, as a (B,) int64 tensor on the logits' device with no
        read back and no update of the reasoning state (a verify step's positions: the caller
        computes their logprobs and advances the gate over the ids it keeps). `logits` is
        modified in place."""
        if (logits.device.type == "cpu" and not use_triton(logits)
                and (gate is None or gate.is_empty())):
            ids = self._sample_plain(logits, seqs)
            if ids is not None:
                return torch.tensor(ids, dtype=torch.int64)
        self._apply_processors(logits, seqs)
        gate = gate or GateInputs()
        _ban(logits, gate)
        return self._sample(logits, seqs, gate)

    def _apply_processors(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        for row, seq in enumerate(seqs):
            if not seq.has_logits_processors:
                continue
            params = seq.params
            if params.has_penalties:
                _apply_penalties(logits[row], seq)
            if params.logit_bias:
                ids = torch.tensor(list(params.logit_bias), device=logits.device)
                bias = torch.tensor(list(params.logit_bias.values()), device=logits.device)
                logits[row].index_add_(0, ids, bias.to(logits.dtype))
            if seq.num_output_tokens < params.min_tokens:
                banned = list(params.stop_token_ids or [])
                if not params.ignore_eos:
                    banned += self.eos_token_ids
                if banned:
                    logits[row, banned] = float("-inf")

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence], gate: GateInputs
                ) -> torch.Tensor:
        params = [seq.params for seq in seqs]
        tensors = SamplingTensors.from_lists(
            temperature=[0.0 if p.greedy else p.temperature for p in params],
            seeds=[seq.seed for seq in seqs],
            steps=[seq.num_output_tokens for seq in seqs],
            top_k=[p.top_k for p in params] if any(p.top_k > 0 for p in params) else None,
            top_p=[p.top_p for p in params] if any(p.top_p < 1 for p in params) else None,
            min_p=[p.min_p for p in params] if any(p.min_p > 0 for p in params) else None,
            device=logits.device,
        )
        return sample(logits, tensors, bitmask=gate.bitmask, grammar_rows=gate.grammar_rows,
                      reasoning=gate.reasoning, slots=gate.slots,
                      vocab_size=self.vocab_size).token_ids


def _ban(logits: torch.Tensor, gate: GateInputs) -> None:
    """-inf at the gate's banned ids on its banned rows."""
    if gate.banned_rows and gate.banned_ids:
        rows = torch.tensor(gate.banned_rows, device=logits.device)
        logits[rows[:, None], torch.tensor(gate.banned_ids, device=logits.device)] = -torch.inf


def advance_reasoning(gate: GateInputs, token_ids: torch.Tensor
                      ) -> tuple[list[int], tuple[list[int], ...] | None]:
    """The ids as a host list, after `kernels.update_reasoning_state` advanced the gate's slots
    by them when there is a gate: then also each row's slot (thinking, num_reasoning_tokens,
    progress, start_id), read back in the same transfer (the step's one sync)."""
    if gate.reasoning is None:
        return token_ids.tolist(), None
    state = gate.reasoning
    update_reasoning_state(state, token_ids, gate.slots)
    slots = gate.slots.long()
    host = torch.stack((token_ids, state.thinking[slots].long(),
                        state.num_reasoning_tokens[slots].long(), state.progress[slots].long(),
                        state.start_id[slots].long())).tolist()
    return host[0], tuple(host[1:])


def _apply_penalties(row: torch.Tensor, seq: Sequence) -> None:
    """vLLM's semantics: repetition over prompt + output; presence/frequency over output only."""
    params = seq.params
    counts = seq.output_counts
    assert counts is not None
    if params.repetition_penalty != 1.0:
        seen = counts > 0
        if seq.prompt_mask is not None:
            seen |= seq.prompt_mask
        penalized = torch.where(
            row > 0, row / params.repetition_penalty, row * params.repetition_penalty
        )
        row.copy_(torch.where(seen, penalized, row))
    if params.frequency_penalty:
        row -= params.frequency_penalty * counts.to(row.dtype)
    if params.presence_penalty:
        row -= params.presence_penalty * (counts > 0).to(row.dtype)


def forced_logprob_entries(
    logits: torch.Tensor, token_ids: list[int], k: int
) -> list[tuple[float, int, list[tuple[int, float]]]]:
    """The (logprob, rank, top-k) of each given id under its row of `logits` (N, V): the
    entries of ids that were not sampled (jump-forward), in the sampler's shape."""
    raw = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.tensor(token_ids, device=raw.device)
    chosen = raw.gather(1, ids.unsqueeze(1)).squeeze(1)
    ranks = ((raw > chosen.unsqueeze(1)).sum(1) + 1).tolist()
    top_lp, top_ids = raw.topk(k, dim=-1) if k else (raw[:, :0], raw[:, :0].long())
    top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
    return [(lp, rank, list(zip(ti, tl)))
            for lp, rank, ti, tl in zip(chosen.tolist(), ranks, top_ids, top_lp)]


def make_logprob_entry(
    token: int, entry: tuple[float, int, list[tuple[int, float]]], decode: object
) -> dict[int, Logprob]:
    """One position's {token id: Logprob} dict: the sampled token first, then the top-k."""
    chosen_lp, rank, top = entry
    result = {token: Logprob(chosen_lp, rank, decode(token))}  # type: ignore[operator]
    for r, (tid, lp) in enumerate(top, start=1):
        if tid not in result:
            result[tid] = Logprob(lp, r, decode(tid))  # type: ignore[operator]
    return result
