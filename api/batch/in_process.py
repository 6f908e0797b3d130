"""An HTTP client over the server's own FastAPI app, in this process: batch lines get exactly
what HTTP would answer, without a socket."""

from __future__ import annotations

import argparse
from typing import Any

from thinkgate.api.batch.lines import app_client


class InProcessClient:
    """An HTTP client over the server's FastAPI app, in this process (no socket)."""

    def __init__(self, ns: argparse.Namespace, engine: Any | None = None) -> None:
        from thinkgate.api.launch import build_state
        from thinkgate.api.server.app import build_app

        self.state = build_state(ns, engine)
        self.app = build_app(self.state)

    def client(self) -> Any:
        return app_client(self.app)
