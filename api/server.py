"""The OpenAI-compatible HTTP server: FastAPI app factory and the uvicorn runner.

Routes: /v1/chat/completions and /v1/completions (serving_chat.py, serving_completions.py),
/v1/models, /health, /metrics, /tokenize, /detokenize. Every error leaves through
`errors.to_error`, so clients always see OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from thinkgate.api.errors import APIError, error_body, to_error, unknown_model_error
from thinkgate.api.generation import cancel_on_disconnect
from thinkgate.api.metrics import ServerMetrics
from thinkgate.api.protocol import DetokenizeRequest, TokenizeRequest
from thinkgate.engine.errors import EngineDeadError

logger = logging.getLogger(__name__)

_OPEN_PATHS = ("/health", "/metrics", "/ping")


@dataclass(frozen=True)
class ServerConfig:
    """How the HTTP layer behaves (the model and engine are configured elsewhere)."""

    served_model_names: tuple[str, ...]
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ("*",)
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    max_concurrent_requests: int = 512  # generation requests in flight before 429
    return_reasoning_content: bool = True  # also send `reasoning_content` (older clients)

    def __post_init__(self) -> None:
        if not self.served_model_names:
            raise ValueError("served_model_names must name at least one model")
        if self.max_concurrent_requests < 1:
            raise ValueError(
                f"max_concurrent_requests must be >= 1, got {self.max_concurrent_requests}"
            )


@dataclass
class ServerState:
    """What the route handlers share: the engine, its chat layer, config and metrics."""

    engine: Any  # the async engine (thinkgate.engine): generate / abort / tokenizer
    config: ServerConfig
    metrics: ServerMetrics
    chat: Any  # thinkgate.api.chat.ChatLayer: template, parsers, constraints
    max_model_len: int
    created: int = field(default_factory=lambda: int(time.time()))
    in_flight: int = 0

    @property
    def model_name(self) -> str:
        return self.config.served_model_names[0]

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.config.served_model_names:
            raise unknown_model_error(model)

    def admit(self) -> None:
        """Take a slot for one generation request or raise 429."""
        if self.in_flight >= self.config.max_concurrent_requests:
            self.metrics.rejected.inc()
            raise APIError(
                f"The server is at capacity ({self.config.max_concurrent_requests} requests in "
                "flight); retry later.",
                status_code=429,
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )
        self.in_flight += 1
        self.metrics.running.set(self.in_flight)

    def release(self) -> None:
        self.in_flight -= 1
        self.metrics.running.set(self.in_flight)


def error_response(exc: BaseException) -> JSONResponse:
    status, body = to_error(exc)
    return JSONResponse(body, status_code=status)


async def full_response(request: Request, work: Coroutine[Any, Any, dict[str, Any]]) -> Response:
    """A non-streaming answer: `work`'s body, or 499 when the client went away first."""
    body = await cancel_on_disconnect(request, work)
    return JSONResponse(body) if body is not None else Response(status_code=499)


async def stream_response(
    outputs: AsyncGenerator[Any, None],
    events: Callable[[Any, AsyncGenerator[Any, None]], AsyncGenerator[str, None]],
) -> Response:
    """A streaming answer: the SSE `events(first, rest)` of the engine's `outputs`, then [DONE]."""
    try:  # the first output surfaces engine-side rejections (e.g. a bad grammar) as HTTP errors
        first = await anext(outputs, None)
    except Exception as exc:
        await outputs.aclose()
        return error_response(exc)
    return StreamingResponse(_sse(events(first, outputs), outputs), media_type="text/event-stream")


async def _sse(
    events: AsyncGenerator[str, None], outputs: AsyncGenerator[Any, None]
) -> AsyncIterator[str]:
    try:
        async for event in events:
            yield event
    except Exception as exc:  # after the 200 header, errors travel in the stream
        yield f"data: {json.dumps(to_error(exc)[1])}\n\n"
    finally:
        await events.aclose()
        await outputs.aclose()
    yield "data: [DONE]\n\n"


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


def _install_error_handlers(app: FastAPI) -> None:
    async def _handle(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    # Client errors get their own handlers: Starlette re-raises whatever reaches the catch-all
    # `Exception` handler (after answering), which would log a traceback and drop the connection.
    for kind in (APIError, ValidationError, ValueError, TypeError, KeyError, EngineDeadError):
        app.add_exception_handler(kind, _handle)
    app.add_exception_handler(Exception, _handle)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind, None, None),
                            status_code=exc.status_code)


class _AuthMiddleware:
    """401 unless `Authorization: Bearer KEY` (pure ASGI: streaming responses pass untouched)."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] == "http" and scope["method"] != "OPTIONS"
                and scope["path"] not in _OPEN_PATHS
                and dict(scope["headers"]).get(b"authorization") != self.expected):
            body = error_body("Incorrect API key provided.", "invalid_request_error", None,
                              "invalid_api_key")
            await JSONResponse(body, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _CountMiddleware:
    """Counts requests by path and status code for /metrics (pure ASGI)."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(endpoint=scope["path"],
                                             status=str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


def build_app(state: ServerState) -> FastAPI:
    """The FastAPI app over a started engine."""
    from thinkgate.api.serving_chat import router as chat_router
    from thinkgate.api.serving_completions import router as completions_router

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        shutdown = getattr(state.engine, "shutdown", None)
        if shutdown is not None:
            result = shutdown()
            if asyncio.iscoroutine(result):
                await result

    app = FastAPI(title="thinkgate", lifespan=lifespan)
    app.state.server = state
    _install_error_handlers(app)
    app.add_middleware(_CountMiddleware, metrics=state.metrics)
    if state.config.api_key:
        app.add_middleware(_AuthMiddleware, api_key=state.config.api_key)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(state.config.allowed_origins),
        allow_methods=list(state.config.allowed_methods),
        allow_headers=list(state.config.allowed_headers),
        allow_credentials=state.config.allow_credentials,
    )
    app.include_router(chat_router)
    app.include_router(completions_router)
    _add_basic_routes(app, state)
    return app


def _add_basic_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health")
    async def health() -> Response:
        """200 while the engine's step loop runs; 503 once it has died."""
        running = getattr(state.engine, "is_running", True)
        return Response(status_code=200 if running else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "created": state.created, "owned_by": "thinkgate",
             "root": name, "parent": None, "max_model_len": state.max_model_len}
            for name in state.config.served_model_names
        ]
        return {"object": "list", "data": data}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        state.check_model(model_id)
        return {"id": model_id, "object": "model", "created": state.created,
                "owned_by": "thinkgate", "root": model_id, "parent": None,
                "max_model_len": state.max_model_len}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        req: TokenizeRequest = await parse_body(request, TokenizeRequest)
        state.check_model(req.model)
        if req.messages is not None:
            from thinkgate.api.serving_chat import render_for_tokenize

            ids = render_for_tokenize(state, req)
        else:
            ids = state.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)
        out: dict[str, Any] = {"count": len(ids), "max_model_len": state.max_model_len,
                               "tokens": list(ids)}
        if req.return_token_strs:
            out["token_strs"] = state.tokenizer.convert_ids_to_tokens(list(ids))
        return out

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        req: DetokenizeRequest = await parse_body(request, DetokenizeRequest)
        state.check_model(req.model)
        vocab = len(state.tokenizer)
        bad = [t for t in req.tokens if not 0 <= t < vocab]
        if bad:
            raise APIError(f"token ids {bad[:5]} are outside the vocabulary (size {vocab})",
                           param="tokens")
        return {"prompt": state.tokenizer.decode(req.tokens)}
