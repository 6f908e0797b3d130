"""One `/v1/responses` request: items → the chat layer's request → engine → events.

`ResponseTurn` resolves `previous_response_id` from the store, translates the request
(`items.py`), lets the chat layer render and constrain it, and owns its
`ResponseEvents`; `run_events` drives one engine request through the chat layer's stream into
those events. Streamed, non-streamed and background responses all run it (one code path).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from thinkgate.api.errors import APIError
from thinkgate.api.generation import RequestRun, SampleDelta, check_length, generate, merge
from thinkgate.api.logprobs import chat_logprobs
from thinkgate.api.prompt_tokens import PromptTooLong
from thinkgate.api.responses.events import ResponseEvents, item_id
from thinkgate.api.responses.items import (
    ItemError,
    chat_tool_choice,
    chat_tools,
    input_messages,
    output_messages,
    response_format,
)
from thinkgate.api.responses.protocol import ResponsesRequest
from thinkgate.api.responses.store import ResponseStore
from thinkgate.api.sampling import build_sampling_params, sampling_kwargs

Outputs = AsyncIterator[tuple[int, list[SampleDelta]]]


def not_found(response_id: str, param: str = "response_id") -> APIError:
    return APIError(f"Response with id '{response_id}' not found.", status_code=404,
                    param=param)


def _param_of(message: str) -> str | None:
    """The request field a chat-layer ValueError is about (its messages start with it)."""
    head = message.split(" ", 1)[0]
    if head.startswith(("messages", "chat")) or "chat template" in message:
        return "input"
    if head.startswith(("tools", "tool_choice")):
        return head.split("[", 1)[0].strip(":'\"")
    if head.startswith("response_format"):
        return "text.format"
    return None


def _conversation(req: ResponsesRequest, store: ResponseStore) -> list[dict[str, Any]]:
    """The chat messages of `previous_response_id`'s conversation and output, then `input`."""
    prev = None
    if req.previous_response_id is not None:
        prev = store.get(req.previous_response_id)
        if prev is None:
            raise not_found(req.previous_response_id, "previous_response_id")
    try:
        history = prev.messages + output_messages(prev.response["output"]) if prev else []
        return history + input_messages(req.input)
    except ItemError as exc:
        raise APIError(str(exc), param=exc.param) from exc


class ResponseTurn:
    """One validated Responses request, prepared by the chat layer (history included)."""

    def __init__(self, state: Any, req: ResponsesRequest, store: ResponseStore) -> None:
        # state: the server's ServerState (engine, chat layer, config), as generation.py takes it
        self.state, self.req = state, req
        self.messages = _conversation(req, store)  # what a follow-up turn replays
        try:
            tools = chat_tools(req.tools)
            choice = chat_tool_choice(req.tool_choice)
            fmt = response_format(req.text.format if req.text is not None else None)
        except ItemError as exc:
            raise APIError(str(exc), param=exc.param) from exc
        system = [{"role": "system", "content": req.instructions}] if req.instructions else []
        self.top = (req.top_logprobs or 0) if req.wants_logprobs() else None
        base = build_sampling_params(
            sampling_kwargs(req, req.max_output_tokens or state.max_model_len, self.top),
            len(state.tokenizer))
        ckw = dict(req.chat_template_kwargs or {})
        if req.reasoning_effort() == "none":  # vLLM's mapping: no effort, no thinking
            ckw.setdefault("enable_thinking", False)
        try:
            self.prepared = state.chat.prepare(
                system + self.messages, base, tools=tools, tool_choice=choice,
                response_format=fmt, chat_template_kwargs=ckw,
                reasoning_effort=req.reasoning_effort(),
                thinking_token_budget=req.thinking_token_budget,
                parallel_tool_calls=req.parallel_tool_calls)
        except PromptTooLong as exc:
            exc.param = "input"
            raise
        except ValueError as exc:
            raise APIError(str(exc), param=_param_of(str(exc))) from exc
        ids = self.prepared.prompt_token_ids
        max_new = check_length(len(ids), req.max_output_tokens, state.max_model_len, "input")
        self.params = dataclasses.replace(self.prepared.sampling_params, max_tokens=max_new)
        self.id = req.request_id or item_id("resp")
        self.run = RequestRun(self.id, len(ids))
        self.events = ResponseEvents(self.skeleton())

    def skeleton(self) -> dict[str, Any]:
        """The Response object before any output (the fields a request echoes)."""
        req, params = self.req, self.params
        text = req.text.model_dump(exclude_none=True) if req.text is not None else {}
        text.setdefault("format", {"type": "text"})
        return {
            "id": self.id, "object": "response", "created_at": int(time.time()),
            "status": "queued" if req.background else "in_progress",
            "background": req.background, "error": None, "incomplete_details": None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls, "metadata": req.metadata or {},
            "model": self.state.model_name, "output": [],
            "parallel_tool_calls": req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": req.reasoning_effort(), "summary": None},
            "service_tier": req.service_tier or "auto", "store": req.store,
            "temperature": params.temperature, "text": text, "tool_choice": req.tool_choice,
            "tools": req.tools, "top_logprobs": req.top_logprobs or 0, "top_p": params.top_p,
            "truncation": req.truncation or "disabled", "usage": None, "user": req.user,
        }

    def constraint_param(self) -> str:
        if self.req.structured_outputs is not None:
            return "structured_outputs"
        return "tools" if self.prepared.tool_choice != "none" and self.req.tools else "text.format"

    def outputs(self) -> Outputs:
        return merge([generate(self.state, self.prepared.prompt_token_ids, self.params, self.id,
                               self.run, self.constraint_param())])

    def logprobs(self, d: SampleDelta) -> list[dict[str, Any]] | None:
        if self.top is None or not d.logprobs:
            return None
        return chat_logprobs(self.state.tokenizer, d.token_ids, d.logprobs, self.top)

    def usage(self, token_ids: list[int]) -> dict[str, Any]:
        prompt, output = self.run.num_prompt_tokens, self.run.num_completion_tokens
        reasoning = self.state.chat.reasoning_tokens(self.prepared, token_ids)
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": prompt + output}


async def run_events(turn: ResponseTurn, outputs: Outputs) -> AsyncIterator[list[dict[str, Any]]]:
    """The response's events, engine output by engine output; the last list ends it."""
    yield turn.events.start()
    stream = turn.state.chat.stream(turn.prepared)
    token_ids: list[int] = []
    finish = None
    async for _, deltas in outputs:
        for d in deltas:
            token_ids += d.token_ids
            chat_deltas = stream.feed(d.text, d.token_ids)
            if d.finish_reason is not None:
                more, finish = stream.finish(d.finish_reason)
                chat_deltas += more
            events = turn.events.feed(chat_deltas, turn.logprobs(d))
            if events:
                yield events
    events = []
    if finish is None:  # the engine's outputs ended without a finish reason
        more, finish = stream.finish(None)
        events = turn.events.feed(more)
    status = "incomplete" if finish == "length" else "completed"
    reason = "max_output_tokens" if finish == "length" else None
    yield events + turn.events.finish(status, turn.usage(token_ids), reason)
