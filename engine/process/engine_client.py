"""`EngineProcessClient`: the async engine for the server, with the step loop in its own process.

    engine = EngineProcessClient(EngineConfig(...), reasoning_parser="qwen3")   # starts the core
    async for out in engine.generate(prompt, params, request_id):   # RequestOutput as produced
        ...
    engine.shutdown()

Same surface as `AsyncLLMEngine` (generate / abort / tokenizer / max_model_len / stats /
is_running / shutdown), so the API layer does not know which it has. The core process
(`engine_core.py`) owns the model, the KV cache, the grammars and the detokenizer, so HTTP,
JSON and parsing in this process never take the step loop's time (nor its GIL). The pipe is
read by the event loop itself (`add_reader`, bound to the loop of the latest `generate` call):
a reader thread would wait up to the interpreter's switch interval (5 ms) for the GIL after
every read while the loop is busy, and the core would stall on a full pipe. When the core dies (it raised, or it was killed), every open stream raises
`EngineDeadError`, `is_running` turns False and new requests raise `EngineDeadError` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from thinkgate.engine.errors import EngineDeadError
from thinkgate.engine.outputs import CompletionOutput, RequestOutput
from thinkgate.engine.process.engine_core import PackedOutput, core_env, run_engine_core
from thinkgate.engine.sampling_params import RequestOutputKind

logger = logging.getLogger(__name__)

_Stream = tuple[asyncio.AbstractEventLoop, "asyncio.Queue[Any]"]


@contextlib.contextmanager
def _core_environment(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in the environment the spawned core starts with (the parent's own is restored:
    its OpenMP runtime read its settings long ago)."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class EngineProcessClient:
    def __init__(self, config: Any, reasoning_parser: str | None = None,
                 plugins: tuple[str, ...] = (), threads: int | None = None,
                 start_timeout: float | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process holding threads
        self._conn, child = ctx.Pipe(duplex=True)
        spec = {"config": config, "reasoning_parser": reasoning_parser,
                "plugins": tuple(plugins), "threads": threads,
                "log_level": logging.getLogger().getEffectiveLevel()}
        self.process = ctx.Process(target=run_engine_core, args=(child, spec),
                                   name="thinkgate-engine-core", daemon=True)
        with _core_environment(core_env(config, threads)):
            self.process.start()
        child.close()
        info = self._wait_ready(start_timeout)
        self.tokenizer = info["tokenizer"]
        self.max_model_len: int = info["max_model_len"]
        self.vocab_size: int = info["vocab_size"]
        self._stats: dict[str, Any] = info["stats"]
        self._streams: dict[str, _Stream] = {}
        self._send_lock = threading.Lock()
        self._error: str | None = None
        self._stopped = False
        self._reader_loop: asyncio.AbstractEventLoop | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self._error is None and not self._stopped and self.process.is_alive()

    @property
    def error(self) -> str | None:
        """Why the core died; None while it runs and after `shutdown` (a stop, not a death)."""
        return self._error

    def stats(self) -> dict[str, Any]:
        """Scheduler and KV-cache counters as of the core's last message."""
        return dict(self._stats)

    async def generate(self, prompt: str | list[int], params: Any,
                       request_id: str) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its outputs until it finishes; closing the iterator aborts it.

        A request the engine rejects (a bad grammar, a prompt too long) raises its ValueError
        here, before any output."""
        if not self.is_running:
            raise EngineDeadError(self._error or "the engine was shut down")
        if request_id in self._streams:
            raise ValueError(f"request_id {request_id!r} is already running")
        stream: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        if loop is not self._reader_loop:
            self._bind(loop)
        self._streams[request_id] = (loop, stream)
        kind = params.output_kind
        try:
            self._send(("add", request_id, prompt, params))
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        view = _OutputView(request_id, prompt, kind)
        finished = False
        try:
            while True:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                out = view.update(item)
                if out is not None:
                    yield out
                if item[1]:
                    finished = True
                    return
        finally:
            if not finished and self._streams.pop(request_id, None) is not None:
                self._send_abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Stop a request and free what it holds (no-op when it already finished)."""
        if self._streams.pop(request_id, None) is not None:
            self._send_abort(request_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._unbind()
        try:
            self._send(("shutdown",))
        except (OSError, EngineDeadError):
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self._conn.close()
        streams, self._streams = self._streams, {}
        for target in streams.values():  # nobody waits forever on a stopped engine
            _put(target, EngineDeadError("the engine was shut down"))

    # --- the pipe ---------------------------------------------------------------------------

    def _wait_ready(self, timeout: float | None) -> dict[str, Any]:
        waited = 0.0
        while not self._conn.poll(0.5):
            waited += 0.5
            if not self.process.is_alive():
                raise RuntimeError(
                    f"the engine core process exited while starting (exit code "
                    f"{self.process.exitcode}); its log is above")
            if timeout is not None and waited >= timeout:
                self.process.kill()
                raise RuntimeError(f"the engine core did not start within {timeout} s")
        kind, payload = self._conn.recv()
        if kind == "failed":
            self.process.join(5)
            raise payload
        return payload

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except OSError as exc:
            raise EngineDeadError(f"the engine core is gone: {exc}") from exc

    def _send_abort(self, request_id: str) -> None:
        if self.is_running:
            try:
                self._send(("abort", request_id))
            except EngineDeadError:
                pass

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the pipe on `loop` from now on (a new asyncio.run, a test's fresh loop)."""
        self._unbind()
        loop.add_reader(self._conn.fileno(), self._on_readable)
        self._reader_loop = loop

    def _unbind(self) -> None:
        old, self._reader_loop = self._reader_loop, None
        if old is None or old.is_closed():
            return
        try:
            if old.is_running() and old is not _running_loop():
                old.call_soon_threadsafe(old.remove_reader, self._conn.fileno())
            else:
                old.remove_reader(self._conn.fileno())
        except (RuntimeError, OSError, ValueError):  # closed meanwhile
            pass

    def _on_readable(self) -> None:
        """Everything the core has sent so far, handled in order."""
        try:
            while self._conn.poll(0):
                self._handle(self._conn.recv())
        except (EOFError, OSError):
            self._unbind()
            self._die(self._death_reason or "the engine core process exited")

    _death_reason: str | None = None

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "out":
            self._stats = message[2]
            self._dispatch(message[1])
        elif kind == "many":
            for inner in message[1]:
                self._handle(inner)
        elif kind == "reject":
            self._stats = message[3]
            target = self._streams.pop(message[1], None)
            if target is not None:
                _put(target, message[2])
        elif kind == "stats":
            self._stats = message[1]
        elif kind == "dead":
            self._death_reason = f"the engine step loop failed: {message[1]}"

    def _dispatch(self, packed: list[PackedOutput]) -> None:
        for item in packed:
            target = self._streams.get(item[0])
            if target is None:
                continue  # aborted here while the step ran
            if item[1]:
                del self._streams[item[0]]
            _put(target, item)

    def _die(self, reason: str) -> None:
        if self._stopped or self._error is not None:
            return
        self.process.join(0.5)  # a killed core is gone already; this reads its exit code
        code = self.process.exitcode
        self._error = reason if code in (None, 0, 1) else f"{reason} (exit code {code})"
        logger.error("engine core: %s", self._error)
        streams, self._streams = self._streams, {}
        for target in streams.values():
            _put(target, EngineDeadError(self._error))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _put(target: _Stream, item: Any) -> None:
    """Queue `item` on a stream, from its own loop directly or from elsewhere thread-safely."""
    loop, stream = target
    if loop is _running_loop():
        stream.put_nowait(item)
        return
    try:
        loop.call_soon_threadsafe(stream.put_nowait, item)
    except RuntimeError:  # that event loop closed
        pass


class _OutputView:
    """Packed per-step outputs as the RequestOutputs the caller's output_kind asks for."""

    def __init__(self, request_id: str, prompt: str | list[int], kind: Any) -> None:
        self.request_id = request_id
        self.prompt = prompt if isinstance(prompt, str) else None
        self.prompt_ids = list(prompt) if not isinstance(prompt, str) else []
        self.kind = kind
        self.samples: dict[int, CompletionOutput] = {}

    def update(self, item: PackedOutput) -> RequestOutput | None:
        _, finished, completions, cached = item
        if self.kind is RequestOutputKind.DELTA:
            outs = [CompletionOutput(i, text, list(ids), cum, lps, reason, stop, trace)
                    for i, text, ids, cum, lps, reason, stop, trace in completions]
            return RequestOutput(self.request_id, self.prompt, self.prompt_ids, outs, finished,
                                 cached)
        for i, text, ids, cum, lps, reason, stop, trace in completions:
            seen = self.samples.setdefault(i, CompletionOutput(i, "", [], None, None))
            seen.text += text
            seen.token_ids.extend(ids)
            seen.cumulative_logprob = cum
            if lps is not None:
                seen.logprobs = (seen.logprobs or []) + list(lps)
            if trace is not None:
                seen.trace = (seen.trace or []) + list(trace)
            seen.finish_reason, seen.stop_reason = reason, stop
        if self.kind is RequestOutputKind.FINAL_ONLY and not finished:
            return None
        outs = [CompletionOutput(c.index, c.text, list(c.token_ids), c.cumulative_logprob,
                                 list(c.logprobs) if c.logprobs is not None else None,
                                 c.finish_reason, c.stop_reason,
                                list(c.trace) if c.trace is not None else None)
                for _, c in sorted(self.samples.items())]
        return RequestOutput(self.request_id, self.prompt, self.prompt_ids, outs, finished, cached)
