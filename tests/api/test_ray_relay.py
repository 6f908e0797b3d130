"""The replica half of the ingress → replica relay (api/ray_serve/relay.py) without a cluster:
a request as plain data runs through an ASGI app and comes back as its messages, streams chunk
by chunk; a caller that stops reading cancels the app's work."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("ray.serve", reason="the `ray-serve` extra is not installed")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import StreamingResponse  # noqa: E402
from thinkgate.api.ray_serve.relay import request_data, run_asgi  # noqa: E402


def make_app(events: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"body": await request.json(), "query": request.url.query,
                "agent": request.headers.get("user-agent")}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks():
            try:
                for i in range(100):
                    yield f"data: {i}\n\n"
                    await asyncio.sleep(0.01)
                events.append("finished")
            except asyncio.CancelledError:
                events.append("cancelled")
                raise
        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app


def scope(method: str, path: str, query: bytes = b"") -> dict:
    return {"type": "http", "method": method, "path": path, "query_string": query,
            "headers": [(b"user-agent", b"relay-test"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 5555)}


def test_a_request_comes_back_as_the_apps_messages() -> None:
    async def go() -> list[dict]:
        data = request_data(scope("POST", "/echo", b"a=1"), b'{"x": [1, 2]}', False)
        return [m async for m in run_asgi(make_app([]), data)]

    messages = asyncio.run(go())
    assert messages[0]["type"] == "http.response.start" and messages[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in messages[1:])
    assert json.loads(body) == {"body": {"x": [1, 2]}, "query": "a=1", "agent": "relay-test"}


def test_a_stream_comes_chunk_by_chunk_and_stopping_cancels_it() -> None:
    events: list[str] = []

    async def go() -> list[bytes]:
        chunks = []
        messages = run_asgi(make_app(events), request_data(scope("GET", "/stream"), b"", False))
        async for message in messages:
            if message["type"] == "http.response.body" and message.get("body"):
                chunks.append(message["body"])
                if len(chunks) == 3:
                    break
        await messages.aclose()
        await asyncio.sleep(0.05)
        return chunks

    chunks = asyncio.run(go())
    assert chunks == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]
    assert events == ["cancelled"]


def test_an_unknown_route_is_the_apps_own_404() -> None:
    async def go() -> list[dict]:
        data = request_data(scope("GET", "/nowhere"), b"", False)
        return [m async for m in run_asgi(make_app([]), data)]

    assert asyncio.run(go())[0]["status"] == 404
