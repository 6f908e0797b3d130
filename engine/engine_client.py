"""`EngineProcessClient`: the async engine for the server, with the step loop in its own process.

    engine = EngineProcessClient(EngineConfig(...), reasoning_parser="qwen3")   # starts the core
    async for out in engine.generate(prompt, params, request_id):   # RequestOutput as produced
        ...
    engine.shutdown()

Same surface as `AsyncLLMEngine` (generate / abort / tokenizer / max_model_len / stats /
is_running / shutdown), so the API layer does not know which it has. The core process
(`engine_core.py`) owns the model, the KV cache, the grammars and the detokenizer, so HTTP,
JSON and parsing in this process never take the step loop's time (nor its GIL). One reader
thread here receives a message per engine step and hands each event loop its outputs in one
call. When the core dies (it raised, or it was killed), every open stream raises
`EngineDeadError`, `is_running` turns False and new requests raise `EngineDeadError` at once.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from collections.abc import AsyncIterator
from typing import Any

from thinkgate.engine.engine_core import PackedOutput, run_engine_core
from thinkgate.engine.errors import EngineDeadError
from thinkgate.engine.outputs import CompletionOutput, RequestOutput
from thinkgate.engine.sampling_params import RequestOutputKind

logger = logging.getLogger(__name__)

_Stream = tuple[asyncio.AbstractEventLoop, "asyncio.Queue[Any]"]


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
        self._reader = threading.Thread(target=self._read, name="thinkgate-engine-reader",
                                        daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self._error is None and not self._stopped and self.process.is_alive()

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
        self._streams[request_id] = (asyncio.get_running_loop(), stream)
        kind = params.output_kind
        self._send(("add", request_id, prompt, params))
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
        try:
            self._send(("shutdown",))
        except (OSError, EngineDeadError):
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self._conn.close()

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

    def _read(self) -> None:
        reason = "the engine core process exited"
        try:
            while True:
                message = self._conn.recv()
                kind = message[0]
                if kind == "out":
                    self._stats = message[2]
                    self._dispatch(message[1])
                elif kind == "reject":
                    self._stats = message[3]
                    target = self._streams.pop(message[1], None)
                    if target is not None:
                        target[0].call_soon_threadsafe(target[1].put_nowait, message[2])
                elif kind == "stats":
                    self._stats = message[1]
                elif kind == "dead":
                    reason = f"the engine step loop failed: {message[1]}"
        except (EOFError, OSError):
            pass
        self._die(reason)

    def _dispatch(self, packed: list[PackedOutput]) -> None:
        """Hand every event loop its outputs of this step in one thread-safe call."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, PackedOutput]]] = {}
        for item in packed:
            target = self._streams.get(item[0])
            if target is None:
                continue  # aborted here while the step ran
            if item[1]:
                del self._streams[item[0]]
            by_loop.setdefault(target[0], []).append((target[1], item))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # that event loop closed
                pass

    def _die(self, reason: str) -> None:
        if self._stopped:
            return
        self.process.join(2)
        code = self.process.exitcode
        self._error = reason if code in (None, 0, 1) else f"{reason} (exit code {code})"
        logger.error("engine core: %s", self._error)
        streams, self._streams = self._streams, {}
        for loop, stream in streams.values():
            try:
                loop.call_soon_threadsafe(stream.put_nowait, EngineDeadError(self._error))
            except RuntimeError:
                pass


def _deliver(items: list[tuple[Any, PackedOutput]]) -> None:
    for stream, item in items:
        stream.put_nowait(item)


class _OutputView:
    """Packed per-step outputs as the RequestOutputs the caller's output_kind asks for."""

    def __init__(self, request_id: str, prompt: str | list[int], kind: Any) -> None:
        self.request_id = request_id
        self.prompt = prompt if isinstance(prompt, str) else None
        self.prompt_ids = list(prompt) if not isinstance(prompt, str) else []
        self.kind = kind
        self.samples: dict[int, CompletionOutput] = {}

    def update(self, item: PackedOutput) -> RequestOutput | None:
        _, finished, completions = item
        if self.kind is RequestOutputKind.DELTA:
            outs = [CompletionOutput(i, text, list(ids), cum, lps, reason, stop)
                    for i, text, ids, cum, lps, reason, stop in completions]
            return RequestOutput(self.request_id, self.prompt, self.prompt_ids, outs, finished)
        for i, text, ids, cum, lps, reason, stop in completions:
            seen = self.samples.setdefault(i, CompletionOutput(i, "", [], None, None))
            seen.text += text
            seen.token_ids.extend(ids)
            seen.cumulative_logprob = cum
            if lps is not None:
                seen.logprobs = (seen.logprobs or []) + list(lps)
            seen.finish_reason, seen.stop_reason = reason, stop
        if self.kind is RequestOutputKind.FINAL_ONLY and not finished:
            return None
        outs = [CompletionOutput(c.index, c.text, list(c.token_ids), c.cumulative_logprob,
                                 list(c.logprobs) if c.logprobs is not None else None,
                                 c.finish_reason, c.stop_reason)
                for _, c in sorted(self.samples.items())]
        return RequestOutput(self.request_id, self.prompt, self.prompt_ids, outs, finished)
