"""POST /v1/responses (+ GET, DELETE and cancel by id) through the shared chat layer.

A thin translator: `responses_items` turns input items, tools, tool_choice and text.format into
the chat layer's arguments; the chat layer renders, constrains and parses; `responses_events`
turns its deltas into typed events and output items. Non-streamed, background and streamed
responses all run `_run` (one code path); only what is done with the events differs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from thinkgate.api.errors import APIError, to_error
from thinkgate.api.generation import RequestRun, SampleDelta, check_length, generate, merge
from thinkgate.api.responses_events import ResponseEvents, item_id
from thinkgate.api.responses_items import (
    ItemError,
    chat_tool_choice,
    chat_tools,
    input_messages,
    output_messages,
    response_format,
)
from thinkgate.api.responses_protocol import ResponsesRequest
from thinkgate.api.responses_store import ResponseStore, StoredResponse
from thinkgate.api.sampling import build_sampling_params, sampling_kwargs
from thinkgate.api.server.helpers import error_response, full_response, parse_body
from thinkgate.api.server.state import ServerState

router = APIRouter()

Outputs = AsyncIterator[tuple[int, list[SampleDelta]]]


def _not_found(response_id: str, param: str = "response_id") -> APIError:
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


class _Turn:
    """One validated Responses request, prepared by the chat layer."""

    def __init__(self, state: ServerState, req: ResponsesRequest, store: ResponseStore) -> None:
        self.state, self.req = state, req
        if req.wants_logprobs():
            raise APIError("message.output_text.logprobs is not supported yet", param="include")
        prev = None
        if req.previous_response_id is not None:
            prev = store.get(req.previous_response_id)
            if prev is None:
                raise _not_found(req.previous_response_id, "previous_response_id")
        try:
            history = prev.messages + output_messages(prev.response["output"]) if prev else []
            self.messages = history + input_messages(req.input)
            tools = chat_tools(req.tools)
            choice = chat_tool_choice(req.tool_choice)
            fmt = response_format(req.text.format if req.text is not None else None)
        except ItemError as exc:
            raise APIError(str(exc), param=exc.param) from exc
        system = [{"role": "system", "content": req.instructions}] if req.instructions else []
        base = build_sampling_params(
            sampling_kwargs(req, req.max_output_tokens or state.max_model_len, None),
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

    def usage(self, token_ids: list[int]) -> dict[str, Any]:
        prompt, output = self.run.num_prompt_tokens, self.run.num_completion_tokens
        reasoning = self.state.chat.reasoning_tokens(self.prepared, token_ids)
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": prompt + output}


async def _run(turn: _Turn, outputs: Outputs) -> AsyncIterator[list[dict[str, Any]]]:
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
            events = turn.events.feed(chat_deltas)
            if events:
                yield events
    if finish is None:
        more, finish = stream.finish(None)
        turn.events.feed(more)
    status = "incomplete" if finish == "length" else "completed"
    reason = "max_output_tokens" if finish == "length" else None
    yield turn.events.finish(status, turn.usage(token_ids), reason)


def _keep(store: ResponseStore, turn: _Turn) -> None:
    if turn.req.store:
        store.put(StoredResponse(turn.events.response, turn.messages))


async def _collect(turn: _Turn, store: ResponseStore) -> dict[str, Any]:
    async for _ in _run(turn, turn.outputs()):
        pass
    _keep(store, turn)
    return turn.events.response


async def _background(turn: _Turn, entry: StoredResponse) -> None:
    response = entry.response
    try:
        outputs = turn.outputs()
        async for _ in _run(turn, outputs):
            if response["status"] == "queued":
                response["status"] = "in_progress"
    except Exception as exc:  # the response records the failure; nobody waits on this task
        _, body = to_error(exc)
        response.update(status="failed", error={"code": body["error"].get("code") or "error",
                                                "message": body["error"]["message"]})
    finally:
        entry.task = None


def _sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


async def _stream(turn: _Turn, store: ResponseStore, first: Any, rest: Outputs
                  ) -> AsyncIterator[str]:
    async def outputs() -> Outputs:
        if first is not None:
            yield first
        async for item in rest:
            yield item

    run = _run(turn, outputs())
    try:
        async for events in run:
            yield "".join(_sse(e) for e in events)
        _keep(store, turn)
    except Exception as exc:  # after the 200 header, errors travel as an `error` event
        err = to_error(exc)[1]["error"]
        yield _sse(turn.events.error(err.get("code"), err["message"], err.get("param")))
    finally:
        await run.aclose()
        await rest.aclose()


_RUNNING: set[asyncio.Task[Any]] = set()  # strong refs: an evicted entry's task still runs


def _store(request: Request) -> ResponseStore:
    """The app's store, made on first use (sized by `ServerConfig.responses_store_size`)."""
    store = getattr(request.app.state, "responses", None)
    if store is None:
        size = request.app.state.server.config.responses_store_size
        store = request.app.state.responses = ResponseStore(size)
    return store


@router.post("/v1/responses")
async def create_response(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: ResponsesRequest = await parse_body(request, ResponsesRequest)
    state.check_model(req.model)
    store = _store(request)
    turn = _Turn(state, req, store)
    if req.background:
        if req.stream:
            raise APIError("background responses cannot be streamed yet", param="stream")
        entry = StoredResponse(turn.events.response, turn.messages)
        store.put(entry)
        entry.task = asyncio.get_running_loop().create_task(_background(turn, entry))
        _RUNNING.add(entry.task)
        entry.task.add_done_callback(_RUNNING.discard)
        return JSONResponse(entry.response)
    if not req.stream:
        return await full_response(request, _collect(turn, store))
    outputs = turn.outputs()
    try:  # the first output surfaces engine-side rejections (a bad schema) as HTTP errors
        first = await anext(outputs, None)
    except Exception as exc:
        await outputs.aclose()
        return error_response(exc)
    return StreamingResponse(_stream(turn, store, first, outputs), media_type="text/event-stream")


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str, request: Request) -> Any:
    entry = _store(request).get(response_id)
    if entry is None:
        raise _not_found(response_id)
    return JSONResponse(entry.response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Any:
    entry = _store(request).delete(response_id)
    if entry is None:
        raise _not_found(response_id)
    if entry.task is not None:
        entry.task.cancel()
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    entry = _store(request).get(response_id)
    if entry is None:
        raise _not_found(response_id)
    if entry.response["status"] not in ("queued", "in_progress") or entry.task is None:
        raise APIError("Cannot cancel a synchronous response.", param="response_id")
    entry.response["status"] = "cancelled"
    task = entry.task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return JSONResponse(entry.response)
