"""Error handlers and the pure-ASGI middlewares: API-key check and request counting."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from thinkgate.api.anthropic.errors import (
    anthropic_body,
    anthropic_error_response,
    is_anthropic_path,
)
from thinkgate.api.errors import APIError, error_body
from thinkgate.api.metrics import ServerMetrics
from thinkgate.api.server.helpers import error_response
from thinkgate.api.server.playground import OPEN_PATHS as PLAYGROUND_PATHS
from thinkgate.engine.errors import EngineDeadError

_OPEN_PATHS = ("/health", "/metrics", "/ping", *PLAYGROUND_PATHS)


def install_error_handlers(app: FastAPI) -> None:
    async def _handle(request: Request, exc: Exception) -> JSONResponse:
        if is_anthropic_path(request.url.path):  # each dialect answers in its own shape
            return anthropic_error_response(exc)
        return error_response(exc)

    # Client errors get their own handlers: Starlette re-raises whatever reaches the catch-all
    # `Exception` handler (after answering), which would log a traceback and drop the connection.
    for kind in (APIError, ValidationError, ValueError, TypeError, KeyError, EngineDeadError):
        app.add_exception_handler(kind, _handle)
    app.add_exception_handler(Exception, _handle)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _handle(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if is_anthropic_path(request.url.path):
            return JSONResponse(anthropic_body(exc.status_code, str(exc.detail)),
                                status_code=exc.status_code)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind, None, None),
                            status_code=exc.status_code)


class AuthMiddleware:
    """401 unless `Authorization: Bearer KEY` or `x-api-key: KEY` (Anthropic's header)
    (pure ASGI: streaming responses pass untouched)."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.key = api_key.encode()
        self.bearer = b"Bearer " + self.key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] == "http" and scope["method"] != "OPTIONS"
                and scope["path"] not in _OPEN_PATHS and not self._allowed(scope["headers"])):
            if is_anthropic_path(scope["path"]):
                body = anthropic_body(401, "invalid x-api-key")
            else:
                body = error_body("Incorrect API key provided.", "invalid_request_error", None,
                                  "invalid_api_key")
            await JSONResponse(body, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        found = dict(headers)  # both compared in constant time, whatever the first one gave
        bearer = hmac.compare_digest(found.get(b"authorization", b""), self.bearer)
        return hmac.compare_digest(found.get(b"x-api-key", b""), self.key) | bearer


class CountMiddleware:
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
