"""The FastAPI app: middlewares, error handlers and each dialect's router over one state.

This module only assembles; the routes live in one module per dialect (openai_chat.py,
openai_completions.py, basic.py), the shared HTTP helpers in helpers.py, the state in state.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from thinkgate.api.server.anthropic_messages import router as messages_router
from thinkgate.api.server.basic import add_basic_routes
from thinkgate.api.server.guard import RequestGuard, cors_kwargs
from thinkgate.api.server.middleware import AuthMiddleware, CountMiddleware, install_error_handlers
from thinkgate.api.server.openai_batches import add_batch_routes
from thinkgate.api.server.openai_chat import router as chat_router
from thinkgate.api.server.openai_completions import router as completions_router
from thinkgate.api.server.openai_responses import router as responses_router
from thinkgate.api.server.playground import router as playground_router
from thinkgate.api.server.state import ServerConfig, ServerState

__all__ = ["ServerConfig", "ServerState", "build_app"]


def build_app(state: ServerState) -> FastAPI:
    """The FastAPI app over a started engine."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batches.start()  # resumes unfinished online batches
        yield
        await batches.stop()
        shutdown = getattr(state.engine, "shutdown", None)
        if shutdown is not None:
            result = shutdown()
            if asyncio.iscoroutine(result):
                await result

    app = FastAPI(title="thinkgate", lifespan=lifespan)
    app.state.server = state
    install_error_handlers(app)
    app.add_middleware(CountMiddleware, metrics=state.metrics)
    if state.config.api_key:
        app.add_middleware(AuthMiddleware, api_key=state.config.api_key)
    config = state.config
    app.add_middleware(
        CORSMiddleware,
        **cors_kwargs(config.allowed_origins),
        allow_methods=list(config.allowed_methods),
        allow_headers=list(config.allowed_headers),
        allow_credentials=config.allow_credentials,
    )
    app.add_middleware(  # outermost: Host, Origin and size checks come before any work
        RequestGuard, allowed_origins=config.allowed_origins,
        allowed_hosts=config.allowed_hosts, max_request_bytes=config.max_request_bytes,
        max_upload_bytes=config.max_upload_bytes)
    app.include_router(chat_router)
    app.include_router(completions_router)
    app.include_router(responses_router)
    app.include_router(messages_router)
    batches = add_batch_routes(app, state)
    app.include_router(playground_router)
    add_basic_routes(app, state)
    return app
