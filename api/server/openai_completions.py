"""POST /v1/completions: text prompts (or token ids) in, OpenAI text_completion out."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from thinkgate.api.errors import APIError
from thinkgate.api.generation import (
    RequestRun,
    SampleDelta,
    check_length,
    generate,
    merge,
    new_request_id,
)
from thinkgate.api.logprobs import completion_logprobs
from thinkgate.api.prompt_tokens import encode_bounded
from thinkgate.api.protocol import CompletionRequest
from thinkgate.api.sampling import build_sampling_params, sampling_kwargs
from thinkgate.api.server.helpers import full_response, parse_body, stream_response
from thinkgate.api.server.state import ServerState

router = APIRouter()


def _prompts(state: ServerState, prompt: Any) -> list[tuple[str, list[int]]]:
    """(text, ids) per prompt; token-id prompts are checked against the vocabulary."""
    tok = state.tokenizer
    if isinstance(prompt, str):
        prompt = [prompt]
    elif prompt and isinstance(prompt[0], int):
        prompt = [prompt]
    out = []
    vocab = len(tok)
    for p in prompt:
        if isinstance(p, str):
            out.append((p, encode_bounded(lambda t: tok.encode(t, add_special_tokens=False), p,
                                          state.max_model_len, "prompt")))
        else:
            if not p or any(not 0 <= t < vocab for t in p):
                raise APIError(f"prompt token ids must be non-empty and in [0, {vocab})",
                               param="prompt")
            out.append((tok.decode(p), list(p)))
    return out


class _Completion:
    """One /v1/completions request after validation."""

    def __init__(self, state: ServerState, req: CompletionRequest) -> None:
        self.state, self.req = state, req
        self.id = new_request_id("cmpl")
        self.created = int(time.time())
        self.prompts = _prompts(state, req.prompt)
        max_new = [check_length(len(ids), req.max_tokens, state.max_model_len, "prompt")
                   for _, ids in self.prompts]
        self.params = [build_sampling_params(sampling_kwargs(req, m, req.logprobs),
                                             len(state.tokenizer)) for m in max_new]
        self.runs = [RequestRun(f"{self.id}-{i}", len(ids))
                     for i, (_, ids) in enumerate(self.prompts)]

    def streams(self) -> list[AsyncIterator[list[SampleDelta]]]:
        return [generate(self.state, ids, params, run.request_id, run, "structured_outputs")
                for (_, ids), params, run in zip(self.prompts, self.params, self.runs)]

    def choice(self, prompt_index: int, delta: SampleDelta, text: str, offset: int) -> dict:
        logprobs = None
        if self.req.logprobs is not None:
            logprobs = completion_logprobs(self.state.tokenizer, delta.token_ids,
                                           delta.logprobs or [], self.req.logprobs, offset)
        return {"index": prompt_index * self.req.n + delta.index, "text": text,
                "logprobs": logprobs, "finish_reason": delta.finish_reason,
                "stop_reason": delta.stop_reason}

    def usage(self) -> dict[str, int]:
        prompt = sum(r.num_prompt_tokens for r in self.runs)
        completion = sum(r.num_completion_tokens for r in self.runs)
        cached = sum(r.num_cached_tokens for r in self.runs)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def envelope(self, choices: list[dict], usage: dict | None = None) -> dict:
        body = {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.state.model_name, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return body


async def _full(c: _Completion) -> dict:
    texts: dict[tuple[int, int], list[str]] = {}
    merged: dict[tuple[int, int], SampleDelta] = {}
    async for prompt_index, deltas in merge(c.streams()):
        for d in deltas:
            key = (prompt_index, d.index)
            texts.setdefault(key, []).append(d.text)
            acc = merged.setdefault(key, SampleDelta(d.index, "", [], []))
            acc.token_ids += d.token_ids
            acc.logprobs += d.logprobs or []
            acc.finish_reason, acc.stop_reason = d.finish_reason, d.stop_reason
    choices = []
    for (prompt_index, _), acc in sorted(merged.items()):
        text = "".join(texts[(prompt_index, acc.index)])
        if c.req.echo:
            text = c.prompts[prompt_index][0] + text
        choices.append(c.choice(prompt_index, acc, text, 0))
    return c.envelope(choices, c.usage())


async def _stream(c: _Completion, first: tuple[int, list[SampleDelta]] | None,
                  rest: AsyncIterator[tuple[int, list[SampleDelta]]]) -> AsyncIterator[str]:
    offsets: dict[tuple[int, int], int] = {}
    echoed: set[tuple[int, int]] = set()
    item = first
    while item is not None:
        prompt_index, deltas = item
        choices = []
        for d in deltas:
            key = (prompt_index, d.index)
            text = d.text
            if c.req.echo and key not in echoed:
                echoed.add(key)
                text = c.prompts[prompt_index][0] + text
            choices.append(c.choice(prompt_index, d, text, offsets.get(key, 0)))
            offsets[key] = offsets.get(key, 0) + len(text)
        yield f"data: {json.dumps(c.envelope(choices))}\n\n"
        item = await anext(rest, None)
    opts = c.req.stream_options
    if opts is not None and opts.include_usage:
        yield f"data: {json.dumps(c.envelope([], c.usage()))}\n\n"


@router.post("/v1/completions")
async def create_completion(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: CompletionRequest = await parse_body(request, CompletionRequest)
    state.check_model(req.model)
    c = _Completion(state, req)
    if not req.stream:
        return await full_response(request, _full(c))
    return await stream_response(merge(c.streams()), lambda first, rest: _stream(c, first, rest))
