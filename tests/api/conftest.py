"""A real `thinkgate serve` subprocess on 127.0.0.1 (one per test module) and its clients."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thinkgate_command() -> list[str]:
    script = Path(sys.executable).parent / "thinkgate"
    if script.exists():
        return [str(script)]
    found = shutil.which("thinkgate")
    return [found] if found else [sys.executable, "-m", "thinkgate.api.cli"]


class ServerProcess:
    """`thinkgate serve` with the given flags; `.url` is the OpenAI base URL."""

    def __init__(self, *flags: str, log_path: Path, env: dict[str, str] | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        model = os.environ.get("THINKGATE_TEST_MODEL")
        self.program = thinkgate_command()
        cmd = [*self.program, "serve", *([model] if model else []),
               "--host", "127.0.0.1", "--port", str(self.port), *flags]
        if "--batch-dir" not in flags:  # /v1/files + /v1/batches write here, not ~/.cache
            cmd += ["--batch-dir", str(log_path.parent / "batches")]
        if model:  # a model folder given for local runs: keep the demo model's settings
            cmd += ["--enable-auto-tool-choice", "--served-model-name", "thinkgate-demo"]
            if "--reasoning-parser" not in flags:
                cmd += ["--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"]
        self.log_path = log_path
        self._log = open(log_path, "w")
        # The server runs as a CPU user's does, on the kernels' torch twins, even under `make
        # test`'s TRITON_INTERPRET=1: interpreted Triton costs ~12 ms a sampling step there. The
        # Triton kernels are checked against the twins in tests/kernels, and in-process
        # decoding through them in tests/engine/test_generate.py and tests/constrained.
        env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self._wait_ready(startup_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"thinkgate serve exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.base}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"thinkgate serve did not become healthy:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-5000:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_server(tmp_path_factory: pytest.TempPathFactory, *flags: str,
                 **options: Any) -> ServerProcess:
    log = tmp_path_factory.mktemp("server") / "serve.log"
    return ServerProcess(*flags, log_path=log, **options)


@pytest.fixture(scope="module")
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Start `thinkgate serve` with extra flags (and ServerProcess's `env`,
    `startup_timeout_s`); every server started is stopped at the end."""
    started: list[ServerProcess] = []

    def start(*flags: str, **options: Any) -> ServerProcess:
        started.append(start_server(tmp_path_factory, *flags, **options))
        return started[-1]

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `thinkgate serve` with the default flags for every module that takes `server` as
    it is (a start costs seconds); a module that needs other flags, or stops or breaks its
    server, overrides `server` with `server_factory`."""
    srv = start_server(tmp_path_factory)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def server(shared_server: ServerProcess) -> ServerProcess:
    assert shared_server.alive(), f"the shared server died:\n{shared_server.log()}"
    return shared_server


@pytest.fixture(scope="module")
def client(server: ServerProcess):
    from openai import OpenAI

    return OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, timeout=60) as c:
        yield c
