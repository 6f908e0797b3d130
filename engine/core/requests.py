"""A request inside the engine: its prompt in vLLM's forms, its sequences, and its outputs.

`tokenize_prompt` takes what vLLM takes (text, token ids, a TextPrompt `{"prompt": ...}` or a
TokensPrompt `{"prompt_token_ids": [...]}`); `make_output` turns a request's sequences into the
`RequestOutput` the caller reads: the whole text so far, or with `RequestOutputKind.DELTA` only
what is new since the last output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from thinkgate.engine.core.detokenizer import IncrementalDetokenizer
from thinkgate.engine.outputs import CompletionOutput, RequestOutput
from thinkgate.engine.sampling_params import RequestOutputKind, SamplingParams
from thinkgate.engine.sequence import Sequence

# vLLM's prompt forms: text, token ids, TextPrompt {"prompt": ...}, TokensPrompt
# {"prompt_token_ids": [...]} (a dict's `cache_salt` is accepted and has no effect here)
PromptType = str | list[int] | dict
_PROMPT_DICT_KEYS = {"prompt", "prompt_token_ids", "cache_salt"}


@dataclass
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence] = field(default_factory=list)
    emitted_chunks: list[int] = field(default_factory=list)  # per seq, for DELTA text

    @property
    def finished(self) -> bool:
        return all(seq.is_finished for seq in self.seqs)


def new_sequence(request: Request, index: int, seed: int, backend: Any, max_total: int,
                 vocab_size: int, device: Any) -> Sequence:
    """The request's `index`th sequence (of `n`): its own seed, detokenizer (stop strings) and,
    with penalties, its output counts and prompt mask on `device`."""
    import torch

    params, ids = request.params, request.prompt_token_ids
    detok = IncrementalDetokenizer(backend, ids, params.skip_special_tokens, params.stop,
                                   params.include_stop_str_in_output)
    seq = Sequence(request.request_id, index, ids, params, seed, detok, max_total)
    if params.has_penalties:
        seq.output_counts = torch.zeros(vocab_size, dtype=torch.int32, device=device)
        if params.repetition_penalty != 1.0:
            seq.prompt_mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
            seq.prompt_mask[ids] = True
    return seq


def tokenize_prompt(prompt: PromptType, tokenizer: Any, vocab_size: int
                    ) -> tuple[str | None, list[int]]:
    """(text or None, token ids) of a prompt; ValueError naming what is wrong with it."""
    if isinstance(prompt, dict):
        prompt = _unwrap_prompt(prompt)
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
        text: str | None = prompt
    elif isinstance(prompt, list | tuple) and all(isinstance(t, int) for t in prompt):
        ids, text = list(prompt), None
    else:
        raise ValueError(
            f"prompt must be a str, a list of token ids, or a dict with 'prompt' or "
            f"'prompt_token_ids', got {type(prompt).__name__}"
        )
    if not ids:
        raise ValueError("prompt is empty")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocab (size {vocab_size})")
    return text, ids


def _unwrap_prompt(prompt: dict) -> str | list[int]:
    """A vLLM TextPrompt / TokensPrompt dict's text or ids; anything else it asks for (images,
    audio, embeddings) is a ValueError naming the keys."""
    unknown = sorted(set(prompt) - _PROMPT_DICT_KEYS)
    if unknown:
        raise ValueError(f"prompt keys {unknown} are not supported (a prompt dict takes "
                         "'prompt' or 'prompt_token_ids')")
    if ("prompt" in prompt) == ("prompt_token_ids" in prompt):
        raise ValueError("a prompt dict needs exactly one of 'prompt' and 'prompt_token_ids', "
                         f"got keys {sorted(prompt)}")
    if "prompt" in prompt:
        text = prompt["prompt"]
        if not isinstance(text, str):
            raise ValueError(f"prompt['prompt'] must be a str, got {type(text).__name__}")
        return text
    ids = prompt["prompt_token_ids"]
    if not isinstance(ids, list | tuple) or not all(isinstance(t, int) for t in ids):
        raise ValueError("prompt['prompt_token_ids'] must be a list of token ids")
    return list(ids)


def make_output(request: Request) -> RequestOutput:
    """The request's output now: everything so far, or (DELTA) what is new since the last."""
    delta = request.params.output_kind is RequestOutputKind.DELTA
    completions = []
    for i, seq in enumerate(request.seqs):
        chunks = seq.detokenizer.released
        start_tok = seq.num_emitted_tokens if delta else 0
        text = "".join(chunks[request.emitted_chunks[i] :] if delta else chunks)
        token_ids = seq.token_ids[seq.num_prompt_tokens + start_tok :]
        logprobs = seq.logprobs[start_tok:] if seq.logprobs is not None else None
        trace = seq.trace[start_tok:] if seq.trace is not None else None
        request.emitted_chunks[i] = len(chunks)
        seq.num_emitted_tokens = seq.num_output_tokens
        completions.append(
            CompletionOutput(
                index=seq.index,
                text=text,
                token_ids=token_ids,
                cumulative_logprob=seq.cumulative_logprob if seq.logprobs is not None else None,
                logprobs=logprobs,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
                trace=trace,
            )
        )
    drafts, tokens, kept = (sum(c) for c in zip(*(seq.spec_counts for seq in request.seqs)))
    metrics = {} if not drafts else {  # speculative decoding: this request's drafts
        "spec_decode_num_drafts": drafts, "spec_decode_num_draft_tokens": tokens,
        "spec_decode_num_accepted_tokens": kept,
        "spec_decode_acceptance_rate": kept / tokens if tokens else 0.0,
        "spec_decode_mean_accepted_length": 1 + kept / drafts}
    return RequestOutput(
        request.request_id,
        request.prompt,
        request.prompt_token_ids,
        completions,
        request.finished,
        num_cached_tokens=request.seqs[0].num_prompt_cached_tokens,
        metrics=metrics,
    )
