"""What every route handler shares: the HTTP layer's config and the server state."""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from thinkgate.api.errors import APIError, unknown_model_error
from thinkgate.api.metrics import ServerMetrics
from thinkgate.api.server.guard import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_UPLOAD_BYTES

# True while a line of an online batch runs through the app (api/batch/online.py): its
# generation also counts in `batch_in_flight`, so batch work can give way to online requests.
BATCH_LINE: ContextVar[bool] = ContextVar("thinkgate_batch_line", default=False)


@dataclass(frozen=True)
class ServerConfig:
    """How the HTTP layer behaves (the model and engine are configured elsewhere)."""

    served_model_names: tuple[str, ...]
    api_key: str | None = None
    # None: loopback origins only; ("*",) any (api/server/guard.py says what each default does)
    allowed_origins: tuple[str, ...] | None = None
    allowed_hosts: tuple[str, ...] | None = None  # Host names answered (None: any)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    max_concurrent_requests: int = 512  # generation requests in flight before 429
    return_reasoning_content: bool = True  # also send `reasoning_content` (older clients)
    responses_store_size: int = 1024  # stored /v1/responses kept, oldest evicted first
    batch_dir: str | None = None  # online batches' files and state (None: the user cache dir)
    max_batch_in_flight: int = 64  # online batch lines in the engine at once

    def __post_init__(self) -> None:
        if not self.served_model_names:
            raise ValueError("served_model_names must name at least one model")
        if self.max_concurrent_requests < 1:
            raise ValueError(
                f"max_concurrent_requests must be >= 1, got {self.max_concurrent_requests}"
            )
        if self.responses_store_size < 0:
            raise ValueError(
                f"responses_store_size must be >= 0, got {self.responses_store_size}")
        for name in ("max_request_bytes", "max_upload_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_batch_in_flight < 1:
            raise ValueError(
                f"max_batch_in_flight must be >= 1, got {self.max_batch_in_flight}"
            )


class ClusterView(Protocol):
    """The service this server is one replica of (api/ray_serve/): /health and /metrics
    answer for every replica, not this one alone."""

    async def health(self) -> tuple[int, dict[str, Any]]:
        """(status code, JSON body)."""

    async def metrics(self) -> str:
        """Every replica's Prometheus text, each sample labelled with its replica."""


@dataclass
class ServerState:
    """What the route handlers share: the engine, its chat layer, config and metrics."""

    engine: Any  # the async engine (thinkgate.engine): generate / abort / tokenizer
    config: ServerConfig
    metrics: ServerMetrics
    chat: Any  # thinkgate.api.chat.ChatLayer: template, parsers, constraints
    max_model_len: int
    max_num_seqs: int | None = None  # the engine's, where known (batch lines leave room)
    created: int = field(default_factory=lambda: int(time.time()))
    in_flight: int = 0
    batch_in_flight: int = 0  # of in_flight: lines of online batches
    cluster: ClusterView | None = None  # set where this server is one replica of several

    @property
    def online_in_flight(self) -> int:
        return self.in_flight - self.batch_in_flight

    @property
    def model_name(self) -> str:
        return self.config.served_model_names[0]

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.config.served_model_names:
            raise unknown_model_error(model)

    @staticmethod
    def mark_batch_work() -> None:
        """Count the calling task's generation requests as batch work (`batch_in_flight`)."""
        BATCH_LINE.set(True)

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
        self.batch_in_flight += BATCH_LINE.get()
        self.metrics.running.set(self.in_flight)

    def release(self) -> None:
        self.in_flight -= 1
        self.batch_in_flight -= BATCH_LINE.get()
        self.metrics.running.set(self.in_flight)
