"""The HTTP helpers every dialect's router uses: JSON bodies in, JSON or SSE answers out.

Every failure leaves through `errors.to_error`; a router picks its own error shape by passing
`to_error=` where it differs from OpenAI's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from thinkgate.api.errors import APIError, to_error
from thinkgate.api.generation import cancel_on_disconnect

DONE = "data: [DONE]\n\n"


def error_response(exc: BaseException) -> JSONResponse:
    status, body = to_error(exc)
    return JSONResponse(body, status_code=status)


def error_event(exc: BaseException) -> str:
    """An error after the 200 header, as OpenAI's SSE streams carry it."""
    return f"data: {json.dumps(to_error(exc)[1])}\n\n"


async def full_response(request: Request, work: Coroutine[Any, Any, dict[str, Any]]) -> Response:
    """A non-streaming answer: `work`'s body, or 499 when the client went away first."""
    body = await cancel_on_disconnect(request, work)
    return JSONResponse(body) if body is not None else Response(status_code=499)


async def stream_response(
    outputs: AsyncGenerator[Any, None],
    events: Callable[[Any, AsyncGenerator[Any, None]], AsyncGenerator[str, None]],
    *,
    on_error: Callable[[BaseException], Response] = error_response,
    on_stream_error: Callable[[BaseException], str] = error_event,
    done: str | None = DONE,
) -> Response:
    """A streaming answer: the SSE `events(first, rest)` of the engine's `outputs`, then `done`.

    A dialect with its own error shape or ending passes `on_error` (before the stream starts),
    `on_stream_error` (the SSE text of an error after the 200 header) and `done`."""
    try:  # the first output surfaces engine-side rejections (e.g. a bad grammar) as HTTP errors
        first = await anext(outputs, None)
    except Exception as exc:
        await outputs.aclose()
        return on_error(exc)
    return StreamingResponse(_sse(events(first, outputs), outputs, on_stream_error, done),
                             media_type="text/event-stream")


async def _sse(
    events: AsyncGenerator[str, None], outputs: AsyncGenerator[Any, None],
    on_stream_error: Callable[[BaseException], str], done: str | None,
) -> AsyncIterator[str]:
    try:
        async for event in events:
            yield event
    except Exception as exc:  # after the 200 header, errors travel in the stream
        yield on_stream_error(exc)
    finally:
        await events.aclose()
        await outputs.aclose()
    if done is not None:
        yield done


async def parse_body(request: Request, model: type[BaseModel]) -> Any:
    """Read and validate a JSON body; every failure is a 400 through `to_error`."""
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise APIError(f"We could not parse the JSON body of your request: {exc}") from exc
    if not isinstance(data, dict):
        raise APIError("The request body must be a JSON object.")
    return model.model_validate(data)
