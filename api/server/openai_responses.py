"""POST /v1/responses (+ GET, DELETE and cancel by id) through the shared chat layer.

A thin translator: `responses/turn.py`'s `ResponseTurn` prepares the request on the chat layer and
`run_events` yields its typed events; this module only decides what happens to them: folded
into one JSON answer, sent as SSE (`event: TYPE` + `data: JSON`, no `[DONE]`, like vLLM and
OpenAI), or run as a background task whose response (and, when streamed, events) live in the
store for `GET /v1/responses/{id}` (`?stream=true&starting_after=N` replays the events).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from thinkgate.api.errors import APIError, to_error
from thinkgate.api.responses.protocol import ResponsesRequest
from thinkgate.api.responses.store import ResponseStore, StoredResponse
from thinkgate.api.responses.turn import Outputs, ResponseTurn, not_found, run_events
from thinkgate.api.server.helpers import error_response, full_response, parse_body
from thinkgate.api.server.state import ServerState

router = APIRouter()

_RUNNING: set[asyncio.Task[Any]] = set()  # strong refs: an evicted entry's task still runs


def _store(request: Request) -> ResponseStore:
    """The app's store, made on first use (sized by `ServerConfig.responses_store_size`)."""
    store = getattr(request.app.state, "responses", None)
    if store is None:
        size = request.app.state.server.config.responses_store_size
        store = request.app.state.responses = ResponseStore(size)
    return store


def _keep(store: ResponseStore, turn: ResponseTurn) -> None:
    if turn.req.store:
        store.put(StoredResponse(turn.events.response, turn.messages))


def _error_event(turn: ResponseTurn, exc: Exception) -> dict[str, Any]:
    err = to_error(exc)[1]["error"]
    return turn.events.error(err.get("code"), err["message"], err.get("param"))


def _sse(events: list[dict[str, Any]]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


async def _collect(turn: ResponseTurn, store: ResponseStore) -> dict[str, Any]:
    async for _ in run_events(turn, turn.outputs()):
        pass
    _keep(store, turn)
    return turn.events.response


async def _stream(turn: ResponseTurn, store: ResponseStore, first: Any, rest: Outputs
                  ) -> AsyncIterator[str]:
    async def outputs() -> Outputs:
        if first is not None:
            yield first
        async for item in rest:
            yield item

    run = run_events(turn, outputs())
    try:
        async for events in run:
            yield _sse(events)
        _keep(store, turn)
    except Exception as exc:  # after the 200 header, errors travel as an `error` event
        yield _sse([_error_event(turn, exc)])
    finally:
        await run.aclose()
        await rest.aclose()


async def _background(turn: ResponseTurn, entry: StoredResponse) -> None:
    response = entry.response
    try:
        async for events in run_events(turn, turn.outputs()):
            if entry.events is not None:
                entry.record(events)
    except Exception as exc:  # the response records the failure; nobody waits on this task
        error = _error_event(turn, exc)
        # OpenAI's ResponseError codes: a request the engine refused is an invalid prompt
        code = error["code"] or ("invalid_prompt" if to_error(exc)[0] < 500 else "server_error")
        response.update(status="failed", error={"code": code, "message": error["message"]})
        if entry.events is not None:
            entry.record([error])
    finally:
        entry.done()


def _start_background(turn: ResponseTurn, store: ResponseStore) -> StoredResponse:
    entry = StoredResponse(turn.events.response, turn.messages)
    if turn.req.stream:
        entry.events = []
    store.put(entry)
    entry.task = asyncio.get_running_loop().create_task(_background(turn, entry))
    _RUNNING.add(entry.task)
    entry.task.add_done_callback(_RUNNING.discard)
    return entry


async def _replay(entry: StoredResponse, after: int) -> AsyncIterator[str]:
    async for event in entry.replay(after):
        yield _sse([event])


@router.post("/v1/responses")
async def create_response(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req: ResponsesRequest = await parse_body(request, ResponsesRequest)
    state.check_model(req.model)
    store = _store(request)
    turn = ResponseTurn(state, req, store)
    if req.background:
        entry = _start_background(turn, store)
        if req.stream:
            return StreamingResponse(_replay(entry, -1), media_type="text/event-stream")
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
async def retrieve_response(response_id: str, request: Request, stream: bool = False,
                            starting_after: int = -1) -> Any:
    entry = _store(request).get(response_id)
    if entry is None:
        raise not_found(response_id)
    if not stream:
        return JSONResponse(entry.response)
    if entry.events is None:
        raise APIError(f"Response '{response_id}' was not created with background: true and "
                       "stream: true, so it has no events to stream.", param="stream")
    return StreamingResponse(_replay(entry, starting_after), media_type="text/event-stream")


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Any:
    entry = _store(request).delete(response_id)
    if entry is None:
        raise not_found(response_id)
    if entry.task is not None:
        entry.task.cancel()
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    entry = _store(request).get(response_id)
    if entry is None:
        raise not_found(response_id)
    if entry.response["status"] not in ("queued", "in_progress") or entry.task is None:
        raise APIError("Cannot cancel a synchronous response.", param="response_id")
    entry.response["status"] = "cancelled"
    task = entry.task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return JSONResponse(entry.response)
