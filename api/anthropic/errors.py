"""Anthropic's error shape for the /v1/messages routes: `errors.to_error`'s answer, re-dressed.

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}

The status decides the type, as Anthropic's API documents them (400 invalid_request_error,
401 authentication_error, 403 permission_error, 404 not_found_error, 413 request_too_large,
429 rate_limit_error, 5xx api_error, 529 overloaded_error). Mid-stream errors are an
`event: error` SSE event with the same body.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse
from thinkgate.api.errors import to_error

PATH = "/v1/messages"

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          529: "overloaded_error"}


def is_anthropic_path(path: str) -> bool:
    return path == PATH or path.startswith(PATH + "/")


def anthropic_body(status: int, message: str) -> dict[str, Any]:
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error(exc: BaseException) -> tuple[int, dict[str, Any]]:
    status, body = to_error(exc)
    return status, anthropic_body(status, body["error"]["message"])


def anthropic_error_response(exc: BaseException) -> JSONResponse:
    status, body = anthropic_error(exc)
    return JSONResponse(body, status_code=status)


def anthropic_error_event(exc: BaseException) -> str:
    return f"event: error\ndata: {json.dumps(anthropic_error(exc)[1])}\n\n"
