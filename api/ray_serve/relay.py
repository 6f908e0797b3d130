"""An HTTP request carried from the ingress to an engine replica as plain data, and the replica's
ASGI messages carried back as a stream (a Serve deployment handle call, `stream=True`).

The ingress reads the request's body (it needs it to route), sends `{method, path, query,
headers, client, body, in_process}` and relays each ASGI message the replica's app sends
(`http.response.start`, `http.response.body`) to its own client as it comes, so streams stay
streams. A replica whose engine core has died answers with one `thinkgate.engine_dead` message
instead of running the request: nothing ran, so the ingress may send it to another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

ENGINE_DEAD = "thinkgate.engine_dead"
_DONE = object()


def request_data(scope: dict[str, Any], body: bytes, in_process: bool) -> dict[str, Any]:
    """The parts of an ASGI HTTP request a replica needs to run it (all picklable)."""
    return {
        "method": scope["method"], "path": scope["path"],
        "query": scope.get("query_string", b""), "headers": list(scope.get("headers", ())),
        "client": tuple(scope["client"]) if scope.get("client") else None,
        "scheme": scope.get("scheme", "http"), "body": body, "in_process": in_process,
    }


def asgi_scope(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": request["method"], "scheme": request["scheme"],
        "path": request["path"], "raw_path": request["path"].encode(),
        "query_string": request["query"], "root_path": "", "headers": request["headers"],
        "client": request["client"], "server": ("thinkgate.replica", 80),
    }


async def run_asgi(app: Any, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Run `request` through the ASGI `app`; yield each message it sends. Closing the iterator
    early (the client left) cancels the app's work, as a disconnect would."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await asyncio.Event().wait()  # no disconnect until the caller cancels this task
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        await queue.put(message)

    async def run() -> None:
        try:
            await app(asgi_scope(request), receive, send)
        finally:
            await queue.put(_DONE)

    task = asyncio.get_running_loop().create_task(run())
    try:
        while (message := await queue.get()) is not _DONE:
            yield message
        await task  # an exception the app let out (its middleware answers errors first)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
