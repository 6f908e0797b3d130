"""One place that turns an exception into OpenAI's error body and HTTP status.

OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`. A client's mistake is a 400
`invalid_request_error` naming the field in `param`; only a bug in thinkgate is a 500.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from thinkgate.engine.errors import EngineDeadError

logger = logging.getLogger(__name__)


class APIError(Exception):
    """An error with a known HTTP status and OpenAI `type`/`code`."""

    def __init__(
        self,
        message: str,
        status_code: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.type = type
        self.param = param
        self.code = code


def context_length_error(num_prompt: int, max_new: int, max_model_len: int,
                         param: str = "messages") -> APIError:
    return APIError(
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{num_prompt + max_new} tokens ({num_prompt} in the {param}, {max_new} in the "
        "completion). Please reduce the length of the messages or completion.",
        param=param,
        code="context_length_exceeded",
    )


def unknown_model_error(model: str) -> APIError:
    return APIError(
        f"The model `{model}` does not exist.",
        status_code=404,
        param="model",
        code="model_not_found",
    )


def error_body(message: str, type: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none", "is-instance"}


def _param_of(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body",)]
    # pydantic adds the union member tried to the location ('str', 'list[int]', a model name,
    # "literal['a','b']"); keep the field path only.
    clean = [p for p in parts if not p[:1].isupper() and "[" not in p and p not in _TYPE_TAGS]
    if not clean:
        return None
    text = clean[0]
    for p in clean[1:]:
        text += f"[{p}]" if p.isdigit() else f".{p}"
    return text


def _from_validation(errors: list[Any]) -> tuple[str, str | None, str | None]:
    """(message, param, code) for the first pydantic error."""
    if not errors:
        return "invalid request", None, None
    first = errors[0]
    ctx_error = (first.get("ctx") or {}).get("error")
    param = getattr(ctx_error, "param", None) or _param_of(tuple(first.get("loc", ())))
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param, None
    if kind == "json_invalid":
        return f"We could not parse the JSON body of your request: {first.get('msg')}", None, None
    message = str(ctx_error) if ctx_error is not None else first.get("msg", "invalid value")
    if param and ctx_error is None:
        message = f"Invalid value for '{param}': {message}"
    return message, param, "invalid_value" if kind != "missing" else "missing_required_parameter"


def to_error(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """Map any exception to (HTTP status, OpenAI error body)."""
    if isinstance(exc, APIError):
        return exc.status_code, error_body(exc.message, exc.type, exc.param, exc.code)
    errors_fn = getattr(exc, "errors", None)
    if isinstance(exc, ValidationError) or (
        callable(errors_fn) and type(exc).__name__ == "RequestValidationError"
    ):
        message, param, code = _from_validation(list(errors_fn()))  # type: ignore[misc]
        return 400, error_body(message, "invalid_request_error", param, code)
    if isinstance(exc, json.JSONDecodeError):
        message = f"We could not parse the JSON body of your request: {exc}"
        return 400, error_body(message, "invalid_request_error", None, None)
    if isinstance(exc, EngineDeadError):
        return HTTPStatus.SERVICE_UNAVAILABLE, error_body(
            f"The engine is not running: {exc}", "server_error", None, "engine_dead")
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        param, code = getattr(exc, "param", None), getattr(exc, "code", None)
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return 400, error_body(message, "invalid_request_error", param, code)
    logger.exception("internal error while serving a request", exc_info=exc)
    status = HTTPStatus.INTERNAL_SERVER_ERROR
    return status, error_body(f"internal server error: {type(exc).__name__}", "server_error",
                              None, None)
