"""What a step's tokens leave on their sequences besides the ids: penalty counts, logprob
entries (with `logprobs`), trace entries (with `token_trace`).

A step writes a row's jump-forward ids first (the text its grammar forced, before the sampled
token), then the sampled token; when a stop rule ends the row inside the forced ids, the entries
past its last output token are taken back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from thinkgate.engine.core.sampler import (
    SamplerOutput,
    forced_logprob_entries,
    make_logprob_entry,
)
from thinkgate.engine.sequence import Sequence

Decode = Callable[[int], str]  # one token id -> its text (a logprob entry's `decoded_token`)


def record_forced(seqs: list[Sequence], forced_logits: dict[int, torch.Tensor],
                  decode: Decode) -> None:
    """Penalty counts, trace and logprob entries of each row's jump-forward ids; `forced_logits`
    maps a row of the batch to the logits the forward computed at its forced positions."""
    for row, seq in enumerate(seqs):
        if not seq.forced_ids:
            continue
        if seq.output_counts is not None:
            for token in seq.forced_ids:
                seq.output_counts[token] += 1
        if seq.trace is not None:  # the grammar allowed one way on: masked, 1 allowed
            seq.trace.extend((token, True, 1, False, False, False) for token in seq.forced_ids)
        logits = forced_logits.get(row)
        if logits is None or seq.logprobs is None:
            continue
        for token, entry in zip(seq.forced_ids, forced_logprob_entries(
                logits, seq.forced_ids, seq.params.logprobs or 0)):
            seq.logprobs.append(make_logprob_entry(token, entry, decode))
            seq.cumulative_logprob += entry[0]


def record_sampled(seqs: list[Sequence], sampled: SamplerOutput, decode: Decode) -> None:
    """Penalty counts and logprob entries of each row's sampled token (-1: the row sampled
    nothing this step)."""
    for seq, token, entry in zip(seqs, sampled.token_ids, sampled.logprobs):
        if token < 0:
            continue
        if seq.output_counts is not None:
            seq.output_counts[token] += 1
        if entry is not None and seq.logprobs is not None:
            seq.logprobs.append(make_logprob_entry(token, entry, decode))
            seq.cumulative_logprob += entry[0]


def drop_unused(seqs: list[Sequence]) -> None:
    """A stop rule inside a row's forced ids drops the token sampled after them: its logprob
    entry (and trace entry) goes too."""
    for seq in seqs:
        if seq.trace is not None and len(seq.trace) > seq.num_output_tokens:
            del seq.trace[seq.num_output_tokens:]
        entries = seq.logprobs
        if entries is not None and len(entries) > seq.num_output_tokens:
            for entry in entries[seq.num_output_tokens:]:
                seq.cumulative_logprob -= next(iter(entry.values())).logprob
            del entries[seq.num_output_tokens:]
