"""POST /v1/chat/completions through the shared chat layer (`thinkgate.api.chat`).

The chat layer renders the template, builds the constrained SamplingParams and turns output text
into OpenAI deltas and messages; this module only adds the HTTP envelope (ids, usage, logprobs,
SSE framing). The non-streaming answer is the streamed deltas folded (`ChatLayer.choice`).
"""

from __future__ import annotations

import dataclasses
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
from thinkgate.api.logprobs import chat_logprobs
from thinkgate.api.prompt_tokens import PromptTooLong
from thinkgate.api.protocol import ChatCompletionRequest, TokenizeRequest
from thinkgate.api.sampling import build_sampling_params, sampling_kwargs
from thinkgate.api.server.helpers import full_response, parse_body, stream_response
from thinkgate.api.server.state import ServerState
from thinkgate.api.token_trace import trace_field
from thinkgate.engine.outputs import CompletionOutput

router = APIRouter()

_PARAMS = ("messages", "tools", "tool_choice", "response_format", "structured_outputs",
           "chat_template", "chat_template_kwargs", "reasoning_effort")


def _param_of(message: str) -> str | None:
    """The request field a chat-layer ValueError is about (its messages start with it)."""
    head = message.split(" ", 1)[0].strip("`'\":,").split("[", 1)[0].split(".", 1)[0]
    if head in _PARAMS:
        return head
    return "messages" if "chat template" in message else None


def _dump(items: list[Any] | None) -> list[dict[str, Any]] | None:
    return [i.model_dump(exclude_none=True, by_alias=True) for i in items] if items else None


class _Chat:
    """One validated chat request, prepared by the chat layer."""

    def __init__(self, state: ServerState, req: ChatCompletionRequest) -> None:
        self.state, self.req = state, req
        self.id = new_request_id("chatcmpl")
        self.created = int(time.time())
        if req.continue_final_message:
            raise APIError("continue_final_message is not supported",
                           param="continue_final_message")
        self.top = (req.top_logprobs or 0) if req.logprobs else None
        limit = req.completion_limit()
        kwargs = sampling_kwargs(req, limit or state.max_model_len, self.top)
        base = build_sampling_params(kwargs, len(state.tokenizer))
        response_format = req.response_format.model_dump(by_alias=True, exclude_none=True) \
            if req.response_format else None
        tool_choice = req.tool_choice.model_dump() if hasattr(req.tool_choice, "model_dump") \
            else req.tool_choice
        try:
            self.prepared = state.chat.prepare(
                [m.model_dump(exclude_none=True) for m in req.messages], base,
                tools=_dump(req.tools), tool_choice=tool_choice, response_format=response_format,
                chat_template_kwargs=req.chat_template_kwargs,
                reasoning_effort=req.reasoning_effort,
                thinking_token_budget=req.thinking_token_budget,
                parallel_tool_calls=req.parallel_tool_calls is not False,
                add_generation_prompt=req.add_generation_prompt, chat_template=req.chat_template)
        except PromptTooLong:
            raise
        except ValueError as exc:
            raise APIError(str(exc), param=_param_of(str(exc))) from exc
        ids = self.prepared.prompt_token_ids
        max_new = check_length(len(ids), limit, state.max_model_len)
        self.params = dataclasses.replace(self.prepared.sampling_params, max_tokens=max_new)
        if req.thinkgate is not None and req.thinkgate.trace:
            self.params = dataclasses.replace(self.params, token_trace=True)
        self.run = RequestRun(self.id, len(ids))
        self.token_ids: dict[int, list[int]] = {}
        self.chunk_prefix: str | None = None

    def stream(self) -> AsyncIterator[tuple[int, list[SampleDelta]]]:
        ids = self.prepared.prompt_token_ids
        return merge([generate(self.state, ids, self.params, self.id, self.run,
                               self.constraint_param())])

    def constraint_param(self) -> str:
        """The request field a constraint the engine rejects came from."""
        if self.req.structured_outputs is not None:
            return "structured_outputs"
        if self.req.response_format is not None and self.req.response_format.type != "text":
            return "response_format"
        return "tools"

    def message_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Apply include_reasoning and the `reasoning_content` alias to a message or delta."""
        out = dict(fields)
        if not self.req.include_reasoning:
            out.pop("reasoning", None)
        elif out.get("reasoning") is not None:
            out["reasoning_content"] = out["reasoning"]
        return out

    def logprobs(self, d: SampleDelta) -> dict[str, Any] | None:
        if self.top is None:
            return None
        return {"content": chat_logprobs(self.state.tokenizer, d.token_ids, d.logprobs or [],
                                         self.top)}

    def usage(self) -> dict[str, Any]:
        prompt = self.run.num_prompt_tokens
        completion = self.run.num_completion_tokens
        reasoning = sum(self.state.chat.reasoning_tokens(self.prepared, ids)
                        for ids in self.token_ids.values())
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": self.run.num_cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": reasoning}}

    def envelope(self, obj: str, choices: list[dict[str, Any]], usage: dict | None) -> dict:
        body = {"id": self.id, "object": obj, "created": self.created,
                "model": self.state.model_name, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        if self.prepared.unenforced_keywords:  # structured_outputs.best_effort
            body["unenforced_keywords"] = self.prepared.unenforced_keywords
        return body


async def _full(c: _Chat) -> dict[str, Any]:
    texts: dict[int, list[str]] = {}
    acc: dict[int, SampleDelta] = {}
    async for _, deltas in c.stream():
        for d in deltas:
            texts.setdefault(d.index, []).append(d.text)
            a = acc.setdefault(d.index, SampleDelta(d.index, "", [], []))
            a.token_ids += d.token_ids
            a.logprobs += d.logprobs or []
            a.finish_reason, a.stop_reason = d.finish_reason, d.stop_reason
            if d.trace:
                a.trace = (a.trace or []) + d.trace
    choices = []
    for index, a in sorted(acc.items()):
        c.token_ids[index] = a.token_ids
        out = CompletionOutput(index, "".join(texts[index]), a.token_ids,
                               finish_reason=a.finish_reason, stop_reason=a.stop_reason)
        choice = c.state.chat.choice(c.prepared, out)
        message = c.message_fields(choice.message)
        if not message.get("tool_calls"):
            message.pop("tool_calls", None)
        choices.append({"index": index, "message": message, "logprobs": c.logprobs(a),
                        "finish_reason": choice.finish_reason, "stop_reason": a.stop_reason})
        if c.params.token_trace:
            choices[-1].update(trace_field(c.state.tokenizer, a.trace or []))
    return c.envelope("chat.completion", choices, c.usage())


def _chunk(c: _Chat, index: int, delta: dict[str, Any], finish: str | None = None,
           logprobs: dict | None = None, extra: dict[str, Any] | None = None) -> str:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    if extra:
        choice.update(extra)
    if c.chunk_prefix is None:  # the envelope is the same for every chunk: serialize it once
        head = json.dumps(c.envelope("chat.completion.chunk", [], None))
        c.chunk_prefix = "data: " + head[: -len("[]}")] + "["
    return f"{c.chunk_prefix}{json.dumps(choice)}]}}\n\n"


async def _stream(c: _Chat, first: tuple[int, list[SampleDelta]] | None,
                  rest: AsyncIterator[tuple[int, list[SampleDelta]]]) -> AsyncIterator[str]:
    """The SSE events of every engine output, one string per output (one socket write)."""
    streams: dict[int, Any] = {}
    item = first
    while item is not None:
        events: list[str] = []
        for d in item[1]:
            if d.index not in streams:
                streams[d.index] = c.state.chat.stream(c.prepared)
                events.append(_chunk(c, d.index, {"role": "assistant", "content": ""}))
            c.token_ids.setdefault(d.index, []).extend(d.token_ids)
            parser = streams[d.index]
            deltas = parser.feed(d.text, d.token_ids)
            logprobs = c.logprobs(d)
            if d.finish_reason is not None:
                more, reason = parser.finish(d.finish_reason)
                deltas += more
            for delta in deltas:
                delta = c.message_fields(delta)
                if delta:
                    events.append(_chunk(c, d.index, delta, logprobs=logprobs))
                    logprobs = None
            if logprobs is not None and logprobs["content"]:
                events.append(_chunk(c, d.index, {}, logprobs=logprobs))
            if d.trace:
                events.append(_chunk(c, d.index, {}, extra=trace_field(c.state.tokenizer,
                                                                       d.trace)))
            if d.finish_reason is not None:
                events.append(_chunk(c, d.index, {}, finish=reason))
        if events:
            yield "".join(events)
        item = await anext(rest, None)
    opts = c.req.stream_options
    if opts is not None and opts.include_usage:
        yield f"data: {json.dumps(c.envelope('chat.completion.chunk', [], c.usage()))}\n\n"


@router.post("/v1/chat/completions")
async def create_chat_completion(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: ChatCompletionRequest = await parse_body(request, ChatCompletionRequest)
    state.check_model(req.model)
    c = _Chat(state, req)
    if not req.stream:
        return await full_response(request, _full(c))
    return await stream_response(c.stream(), lambda first, rest: _stream(c, first, rest))


def render_for_tokenize(state: ServerState, req: TokenizeRequest) -> list[int]:
    """Token ids of `messages` rendered with the chat template (the /tokenize messages form)."""
    try:
        prompt = state.chat.render([m.model_dump(exclude_none=True) for m in req.messages or []],
                                   _dump(req.tools), req.chat_template_kwargs or {},
                                   req.add_generation_prompt)
    except ValueError as exc:
        raise APIError(str(exc), param="messages") from exc
    return state.chat.encode_prompt(prompt)
