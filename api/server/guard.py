"""The server's safe defaults in one place: which origins, which Host names, how many bytes.

`thinkgate serve` runs on people's own machines, next to the browser they use for everything
else. So, unless flags opt out:
- **Origins.** A browser request whose `Origin` is neither allowed (`--allowed-origins`; by
  default the loopback origins `http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`)
  nor the server's own origin is refused with 403, preflight included: a page on another site
  can neither read answers (no CORS grant) nor spend the model or upload files blind.
  `--allowed-origins '["*"]'` is vLLM's default and restores the open behaviour.
- **Host names.** Bound to a loopback address, the server answers only requests whose `Host` is
  a loopback name or address, or one of `--allowed-hosts`: a DNS-rebinding page (its own name
  resolving to 127.0.0.1) gets 400. Bound to any other address there is no Host check unless
  `--allowed-hosts` is given.
- **Bytes.** A body over `--max-request-bytes` (`--max-upload-bytes` for `POST /v1/files`) gets
  413 before it is read whole: at once when `Content-Length` says so (the rest is read and
  thrown away, bounded, so clients that send before they read still get the answer), or as soon
  as a chunked body passes the limit.

Requests an in-process client sends through the app (batch lines, `in_process_app`) skip the
Origin and Host checks; they never came from a browser.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from thinkgate.api.anthropic.errors import anthropic_body, is_anthropic_path
from thinkgate.api.errors import APIError, error_body

# `http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*` (and https, and *.localhost)
LOOPBACK_ORIGIN_REGEX = (
    r"https?://(localhost|[a-z0-9.-]+\.localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?"
)
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_UPLOAD_BYTES = 512 * 1024 * 1024  # OpenAI's limit for one uploaded file
UPLOAD_PATH = "/v1/files"
_DRAIN_MAX_BYTES = 1 << 30  # an oversized body is read and dropped up to this, then cut off
_DRAIN_MAX_SECONDS = 10.0
_IN_PROCESS = "thinkgate.in_process"


def is_loopback_name(host: str) -> bool:
    """localhost, *.localhost, or a loopback address (127.0.0.0/8, ::1)."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """`example.com:8000` -> `example.com`; `[::1]:8000` -> `::1`."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def allowed_hosts_for(bind_host: str | None, allowed_hosts: Iterable[str] | None,
                      ) -> tuple[str, ...] | None:
    """The Host names a server bound to `bind_host` answers (None: any). Loopback names are
    always among them; `*` in `allowed_hosts` turns the check off."""
    extra = tuple(h.lower() for h in allowed_hosts) if allowed_hosts is not None else None
    if extra is not None and "*" in extra:
        return None
    if extra is None and (bind_host is None or not is_loopback_name(bind_host)):
        return None
    return extra or ()


def cors_kwargs(allowed_origins: tuple[str, ...] | None) -> dict[str, Any]:
    """Starlette CORSMiddleware's origin arguments: the given list, or the loopback default."""
    if allowed_origins is None:
        return {"allow_origins": [], "allow_origin_regex": LOOPBACK_ORIGIN_REGEX}
    return {"allow_origins": list(allowed_origins)}


def in_process_app(app: Any) -> Any:
    """`app`, marked so that the guard knows a request came from this process, not a browser."""
    async def marked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await app({**scope, _IN_PROCESS: True} if scope["type"] == "http" else scope,
                  receive, send)
    return marked


def is_in_process(scope: dict[str, Any]) -> bool:
    """Whether `in_process_app` marked this request (it came from this process)."""
    return bool(scope.get(_IN_PROCESS))


class RequestTooLarge(APIError):
    def __init__(self, limit: int, flag: str) -> None:
        super().__init__(f"The request body is larger than this server accepts ({limit} bytes; "
                         f"{flag} sets the limit).", status_code=413,
                         code="request_too_large")


class RequestGuard:
    """Pure-ASGI middleware: the Host check, the Origin check and the body-size limit."""

    def __init__(self, app: Any, *, allowed_origins: tuple[str, ...] | None,
                 allowed_hosts: tuple[str, ...] | None, max_request_bytes: int,
                 max_upload_bytes: int) -> None:
        self.app = app
        self.any_origin = allowed_origins is not None and "*" in allowed_origins
        self.origins = {o.rstrip("/").lower() for o in allowed_origins or ()}
        self.origin_regex = re.compile(LOOPBACK_ORIGIN_REGEX) if allowed_origins is None else None
        self.hosts = allowed_hosts
        self.max_request_bytes = max_request_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if not scope.get(_IN_PROCESS):
            refusal = self._refusal(headers)
            if refusal is not None:
                await _answer(scope, send, *refusal)
                return
        upload = scope["method"] == "POST" and scope["path"] == UPLOAD_PATH
        limit = self.max_upload_bytes if upload else self.max_request_bytes
        flag = "--max-upload-bytes" if upload else "--max-request-bytes"
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            if "100-continue" not in headers.get("expect", "").lower():
                await _drain(receive)  # the client has not sent the body otherwise
            exc = RequestTooLarge(limit, flag)
            await _answer(scope, send, 413, exc.message, exc.code)
            return
        await self.app(scope, _counting(receive, limit, flag), send)

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        host = headers.get("host")
        if self.hosts is not None and host is not None:
            name = host_name(host)
            if not (is_loopback_name(name) or name in self.hosts
                    or host.strip().lower() in self.hosts):
                return (400, f"Host {host!r} is not allowed: this server answers loopback names "
                        "only (--allowed-hosts adds more).", "host_not_allowed")
        origin = headers.get("origin")
        if origin is None or self.any_origin or self._origin_allowed(origin, host):
            return None
        return (403, f"Origin {origin!r} is not allowed (--allowed-origins adds origins).",
                "origin_not_allowed")

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.origins:
            return True
        if self.origin_regex is not None and self.origin_regex.fullmatch(origin):
            return True
        parts = urlsplit(origin)  # the server's own origin: the page it served itself
        return host is not None and parts.scheme in ("http", "https") \
            and parts.netloc == host.strip().lower()


def _counting(receive: Any, limit: int, flag: str) -> Any:
    seen = 0

    async def counted() -> dict[str, Any]:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                if message.get("more_body", False):
                    await _drain(receive)
                raise RequestTooLarge(limit, flag)
        return message
    return counted


async def _drain(receive: Any) -> None:
    """Read the rest of a request body and drop it, within bounds of bytes and time."""
    read, deadline = 0, time.monotonic() + _DRAIN_MAX_SECONDS
    while read < _DRAIN_MAX_BYTES:
        try:
            message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _answer(scope: dict[str, Any], send: Any, status: int, message: str,
                  code: str) -> None:
    if is_anthropic_path(scope["path"]):
        body = anthropic_body(status, message)
    else:
        body = error_body(message, "invalid_request_error", None, code)
    response = JSONResponse(body, status_code=status, headers={"connection": "close"})

    async def no_receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}
    await response(scope, no_receive, send)
