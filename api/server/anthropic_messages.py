"""POST /v1/messages (Anthropic's Messages API) and /v1/messages/count_tokens.

A translator onto the one chat layer: `anthropic/translate.py`'s `chat_args` turns the request into
`ChatLayer.prepare`'s arguments, `generation.generate` runs it, the chat layer's stream turns
output into OpenAI deltas, and `anthropic/events.py`'s `BlockWriter` turns those into Anthropic's
events. Streaming sends the events as `event: NAME` SSE; the non-streaming body is the same
events folded. Errors on these paths have Anthropic's shape (`anthropic/errors.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from thinkgate.api.anthropic.errors import anthropic_error_event, anthropic_error_response
from thinkgate.api.anthropic.events import BlockWriter, Event, fold, stop_fields
from thinkgate.api.anthropic.protocol import CountTokensRequest, MessagesRequest
from thinkgate.api.anthropic.translate import chat_args
from thinkgate.api.errors import APIError
from thinkgate.api.generation import (
    RequestRun,
    SampleDelta,
    check_length,
    generate,
    merge,
    new_request_id,
)
from thinkgate.api.prompt_tokens import PromptTooLong
from thinkgate.api.sampling import build_sampling_params
from thinkgate.api.server.helpers import full_response, parse_body, stream_response
from thinkgate.api.server.state import ServerState

router = APIRouter()

Outputs = AsyncIterator[tuple[int, list[SampleDelta]]]


def _prepare(state: ServerState, req: CountTokensRequest, params: Any = None) -> Any:
    """The chat layer's request for `req`; a ValueError from either side is a 400."""
    state.check_model(req.model)
    try:
        args = chat_args(req)
        return state.chat.prepare(args.messages, params, **args.prepare_kwargs())
    except PromptTooLong:
        raise
    except ValueError as exc:
        raise APIError(str(exc)) from exc


class _Message:
    """One validated Messages request, prepared by the chat layer."""

    def __init__(self, state: ServerState, req: MessagesRequest) -> None:
        self.state, self.req = state, req
        self.id = new_request_id("msg").replace("-", "_")
        optional = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k}
        kwargs = {"max_tokens": req.max_tokens, "stop": req.stop_sequences,
                  **{k: v for k, v in optional.items() if v is not None}}
        base = build_sampling_params(kwargs, len(state.tokenizer))
        self.prepared = _prepare(state, req, base)
        ids = self.prepared.prompt_token_ids
        max_new = check_length(len(ids), req.max_tokens, state.max_model_len)
        self.params = dataclasses.replace(self.prepared.sampling_params, max_tokens=max_new)
        self.run = RequestRun(self.id, len(ids))
        self.token_ids: list[int] = []
        self.finish: tuple[str | None, int | str | None] = (None, None)

    def outputs(self) -> Outputs:
        return merge([generate(self.state, self.prepared.prompt_token_ids, self.params, self.id,
                               self.run, "output_config" if self.req.output_config else "tools")])

    def start(self) -> Event:
        return {"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.state.model_name,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.run.num_prompt_tokens, "output_tokens": 0}}}

    def end(self) -> Event:
        reason, sequence = stop_fields(*self.finish, self.req.stop_sequences)
        thinking = self.state.chat.reasoning_tokens(self.prepared, self.token_ids)
        usage = {"input_tokens": self.run.num_prompt_tokens,
                 "output_tokens": self.run.num_completion_tokens,
                 "output_tokens_details": {"thinking_tokens": thinking}}
        return {"type": "message_delta", "delta": {"stop_reason": reason,
                                                   "stop_sequence": sequence}, "usage": usage}


async def _events(m: _Message, first: tuple[int, list[SampleDelta]] | None,
                  rest: Outputs) -> AsyncIterator[list[Event]]:
    """Every event of the message, one list per engine output (message_start first)."""
    thinking = m.req.thinking
    writer = BlockWriter(omit_thinking=thinking is not None and thinking.display == "omitted")
    parser = m.state.chat.stream(m.prepared)
    yield [m.start()]
    item = first
    while item is not None:
        events: list[Event] = []
        for d in item[1]:
            m.token_ids += d.token_ids
            deltas = parser.feed(d.text, d.token_ids)
            if d.finish_reason is not None:
                more, reason = parser.finish(d.finish_reason)
                deltas += more
                m.finish = (reason, d.stop_reason)
            events += writer.feed(deltas)
        if events:
            yield events
        item = await anext(rest, None)
    yield [*writer.close(), m.end(), {"type": "message_stop"}]


def _sse(events: list[Event]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


async def _stream(m: _Message, first: tuple[int, list[SampleDelta]] | None,
                  rest: Outputs) -> AsyncIterator[str]:
    async for events in _events(m, first, rest):
        yield _sse(events)


async def _full(m: _Message) -> dict[str, Any]:
    outputs = m.outputs()
    try:
        first = await anext(outputs, None)
        message = fold([e async for events in _events(m, first, outputs) for e in events])
    finally:
        await outputs.aclose()
    return message


@router.post("/v1/messages")
async def create_message(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: MessagesRequest = await parse_body(request, MessagesRequest)
    m = _Message(state, req)
    if not req.stream:
        return await full_response(request, _full(m))
    return await stream_response(m.outputs(), lambda first, rest: _stream(m, first, rest),
                                 on_error=anthropic_error_response,
                                 on_stream_error=anthropic_error_event, done=None)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: CountTokensRequest = await parse_body(request, CountTokensRequest)
    num_tokens = len(_prepare(state, req).prompt_token_ids)
    return {"input_tokens": num_tokens, "context_management": {"original_input_tokens": num_tokens}}
