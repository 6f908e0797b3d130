"""The deployment's front: reads each request's body, keys its prompt, and hands it to an engine
replica through a deployment handle whose router is prefix-aware (`routing.py`).

Serve's HTTP proxy picks an ingress replica before any body is read, so routing on the prompt
takes this second tier: `ThinkgateIngress` (light: a tokenizer, no engine; one replica by
default) in front of the `ThinkgateReplica`s (an engine each, the full `thinkgate serve` app).
What it does itself:

- relays every OpenAI route to a replica (`relay.py`): the replica's app answers, streams
  included, so clients see what `thinkgate serve` answers;
- a request that reached a replica whose engine had died (nothing ran) goes once to another
  replica, which the router is told to avoid the dead one for a while;
- owns `/v1/files` and `/v1/batches`: the batch store lives here, not on a replica, and each
  line is relayed like any request (prefix-routed over all replicas). A line whose replica dies
  before answering runs again on a live one (the retry above; a 503 from a dying engine is
  retried as `online.py` retries any 503); each line's result is journaled once, under its
  line and `custom_id`, so the output has every custom_id exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.exceptions import RayError
from thinkgate.api.ray_serve.relay import ENGINE_DEAD, request_data

logger = logging.getLogger(__name__)

ROUTED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
OWN_PREFIXES = ("/v1/files", "/v1/batches")
AVOID_S = 30.0  # how long a replica whose engine died is avoided (it leaves within seconds)
HEALTH_TIMEOUT_S = 5.0  # /health with no replica to answer: 503 dead after this long


@dataclass
class IngressState:
    """What `OnlineBatches` reads of a server's state, for the ingress (no engine here)."""

    config: Any  # thinkgate.api.server.state.ServerConfig
    max_num_seqs: int | None
    engine: Any = None
    online_in_flight: int = 0

    @staticmethod
    def mark_batch_work() -> None:
        from thinkgate.api.server.state import ServerState

        ServerState.mark_batch_work()


@serve.ingress()
class ThinkgateIngress:
    """HTTP in, relayed to the engine replicas; files and batches kept here."""

    def __init__(self, ns_vars: dict[str, Any], engines: Any) -> None:
        from thinkgate.api.batch.online import OnlineBatches
        from thinkgate.api.launch import server_config
        from thinkgate.api.ray_serve.prefix_key import PrefixKeys

        ns = argparse.Namespace(**ns_vars)
        self.engines = engines.options(stream=True)
        self.keys = PrefixKeys.for_flags(ns)
        self.config = server_config(ns)
        seqs = ns.max_num_seqs * ns_vars["replicas"] if ns.max_num_seqs else None
        self.state = IngressState(self.config, seqs)
        self.batch_app = self._batch_app()
        self.batch_app.state.batches = OnlineBatches(self.dispatch, self.state)
        self.avoid: dict[str, float] = {}  # replica unique id → until when

    async def __serve_build_asgi_app__(self) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await self.dispatch(scope, receive, send)

        return app  # a plain function: uvicorn's lifespan runner takes it for ASGI 3

    def _batch_app(self) -> Any:
        from fastapi import FastAPI
        from thinkgate.api.server.guard import RequestGuard
        from thinkgate.api.server.middleware import AuthMiddleware, install_error_handlers
        from thinkgate.api.server.openai_batches import router as batches_router
        from thinkgate.api.server.openai_files import router as files_router

        app = FastAPI(title="thinkgate batches")
        install_error_handlers(app)
        if self.config.api_key:
            app.add_middleware(AuthMiddleware, api_key=self.config.api_key)
        app.add_middleware(
            RequestGuard, allowed_origins=self.config.allowed_origins,
            allowed_hosts=self.config.allowed_hosts,
            max_request_bytes=self.config.max_request_bytes,
            max_upload_bytes=self.config.max_upload_bytes)
        app.include_router(files_router)
        app.include_router(batches_router)
        return app

    # ASGI

    async def dispatch(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] != "http":
            raise ValueError(f"thinkgate's ingress serves HTTP only, got {scope['type']!r}")
        elif scope["path"].startswith(OWN_PREFIXES):
            await self.batch_app(scope, receive, send)
        else:
            await self.relay(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        batches = self.batch_app.state.batches
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await batches.start()  # resumes the unfinished batches from their journals
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await batches.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def relay(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from thinkgate.api.server.guard import is_in_process
        from thinkgate.api.server.state import BATCH_LINE

        body = await self._read_body(receive, send)
        if body is None:
            return
        path = scope["path"]
        hashes = self.keys.hashes(path, body) if scope["method"] == "POST" and path in ROUTED \
            else []
        batch_line = BATCH_LINE.get()
        data = request_data(scope, body, is_in_process(scope))
        online = path in ROUTED and not batch_line
        self.state.online_in_flight += online
        answered = asyncio.Event()

        async def tracked_send(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered.set()

        watcher = asyncio.ensure_future(
            _disconnected(receive, asyncio.current_task(), answered))
        try:
            await self._answer(data, hashes, batch_line, tracked_send)
        finally:
            watcher.cancel()
            self.state.online_in_flight -= online

    async def _answer(self, data: dict[str, Any], hashes: list[str], batch_line: bool,
                      send: Any) -> None:
        """Run on a replica; once more on another when the first could not run it."""
        first_timeout = HEALTH_TIMEOUT_S if data["path"] == "/health" else None
        for attempt in (1, 2):
            _own_request_ids(batch_line)
            response = self.engines.handle_http.remote(
                data, prefix_hashes=hashes, avoid=self._avoided(), batch_line=batch_line)
            started = sse = False
            try:
                first = await asyncio.wait_for(response.__anext__(), first_timeout)
                if first["type"] == ENGINE_DEAD:
                    self.avoid[first["replica"]] = time.monotonic() + AVOID_S
                    logger.warning("replica %s: engine dead; request sent on (try %d)",
                                   first["replica"], attempt)
                    continue
                async for message in _chain(first, response):
                    if message["type"] == "http.response.start":
                        started, sse = True, _is_sse(message)
                    await send(message)
                return
            except asyncio.CancelledError:
                response.cancel()
                raise
            except (RayError, asyncio.TimeoutError, StopAsyncIteration) as exc:
                response.cancel()
                logger.warning("relaying %s %s (try %d): %r", data["method"], data["path"],
                               attempt, exc)
                if started:  # the client has its status: end what was sent
                    await send({"type": "http.response.body",
                                "body": _cut_body() if sse else b"", "more_body": False})
                    return
        await _send_unavailable(send, data["path"])

    def _avoided(self) -> list[str]:
        now = time.monotonic()
        self.avoid = {r: until for r, until in self.avoid.items() if until > now}
        return list(self.avoid)

    async def _read_body(self, receive: Any, send: Any) -> bytes | None:
        limit = max(self.config.max_request_bytes, self.config.max_upload_bytes)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await _send_json(send, 413, {"error": {
                    "message": f"The request body is larger than this server accepts ({limit} "
                               "bytes).", "type": "invalid_request_error", "param": None,
                    "code": "request_too_large"}})
                return None
            if not message.get("more_body"):
                return b"".join(chunks)


def _own_request_ids(batch_line: bool) -> None:
    """Give the next handle call request ids of its own. A call made while Serve handles a
    request takes that request's ids, and the batch lines all run in tasks started by the
    `POST /v1/batches` that created them: Serve's router, which tells pending requests apart by
    their internal id, would mix them up. (A retry gets a new internal id too.)"""
    import dataclasses

    from ray.serve._private.utils import generate_request_id
    from ray.serve.context import _RequestContext, _serve_request_context

    context = _serve_request_context.get() or _RequestContext()
    request_id = generate_request_id() if batch_line else context.request_id
    _serve_request_context.set(dataclasses.replace(
        context, request_id=request_id, _internal_request_id=generate_request_id()))


async def _disconnected(receive: Any, task: asyncio.Task[Any] | None,
                        answered: asyncio.Event) -> None:
    """Cancel `task` (the relay) when the client leaves before its answer is whole."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if task is not None and not answered.is_set():
        task.cancel()


async def _chain(first: dict[str, Any], rest: Any) -> Any:
    yield first
    async for message in rest:
        yield message


def _is_sse(start: dict[str, Any]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
               for k, v in start.get("headers", ()))


def _cut_body() -> bytes:
    """What ends a stream whose replica vanished without its own error event."""
    error = {"error": {"message": "The replica serving this request stopped.",
                       "type": "server_error", "param": None, "code": "engine_dead"}}
    return f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()


async def _send_unavailable(send: Any, path: str) -> None:
    if path == "/health":
        await _send_json(send, 503, {"status": "dead", "replicas": {"serving": 0}})
        return
    await _send_json(send, 503, {"error": {
        "message": "No engine replica could take the request; retry later.",
        "type": "server_error", "param": None, "code": "engine_dead"}})


async def _send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
