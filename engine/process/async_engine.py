"""`AsyncLLMEngine`: the engine for the server. The step loop runs on its own thread.

    engine = AsyncLLMEngine(EngineConfig(...))            # or AsyncLLMEngine.from_engine(e)
    async for out in engine.generate(prompt, params, request_id):   # RequestOutput as produced
        ...
    await engine.abort(request_id)                         # also done when the iterator is closed
    engine.shutdown()

Only the loop thread touches the `LLMEngine`; callers send it commands through a queue and get
results back through futures (adds, so a bad request raises in the caller) and per-request
asyncio queues (outputs). Choose `SamplingParams.output_kind` for what each output carries.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

from thinkgate.engine.config import EngineConfig
from thinkgate.engine.core.llm_engine import LLMEngine
from thinkgate.engine.core.requests import PromptType
from thinkgate.engine.errors import EngineDeadError
from thinkgate.engine.outputs import RequestOutput
from thinkgate.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class AsyncLLMEngine:
    def __init__(self, config: EngineConfig | None = None, engine: LLMEngine | None = None) -> None:
        self.engine = engine if engine is not None else LLMEngine(config or EngineConfig())
        self._commands: queue.SimpleQueue[tuple[str, Any, Future[Any]]] = queue.SimpleQueue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = {}
        self._wake = threading.Event()
        self._stopped = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="thinkgate-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_engine(cls, engine: LLMEngine) -> AsyncLLMEngine:
        return cls(engine=engine)

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def stats(self) -> dict[str, Any]:
        """Scheduler and KV-cache counters (read from another thread: a snapshot, not a lock)."""
        return self.engine.stats()

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive() and self._error is None

    async def generate(
        self, prompt: PromptType, params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its outputs until it finishes; closing the iterator aborts it."""
        stream: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        try:
            await self._call("add", (request_id, prompt, params, loop, stream))
        except asyncio.CancelledError:
            # the loop may have added it before the cancel landed (abort is a no-op otherwise)
            await asyncio.shield(self.abort(request_id))
            raise
        finished = False
        try:
            while True:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise EngineDeadError(f"the engine step loop failed: {item!r}") from item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:
                await self.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Stop a request and free what it holds (no-op when it already finished)."""
        if self._thread.is_alive():
            await self._call("abort", request_id)

    async def _call(self, kind: str, payload: Any) -> Any:
        if self._error is not None or self._stopped:
            raise EngineDeadError("the engine is not running")
        future: Future[Any] = Future()
        self._commands.put((kind, payload, future))
        self._wake.set()
        return await asyncio.wrap_future(future)

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout)

    # --- the loop thread -------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stopped:
                self._run_commands()
                if self.engine.has_unfinished_requests():
                    self._dispatch(self.engine.step())
                    for request_id, exc in self.engine.take_rejected():
                        target = self._streams.pop(request_id, None)
                        if target is not None:
                            target[0].call_soon_threadsafe(target[1].put_nowait, exc)
                else:
                    self._wake.wait()
                    self._wake.clear()
        except BaseException as exc:  # the loop must report, not vanish
            logger.exception("engine step loop failed")
            self._error = exc
            for loop, stream in self._streams.values():
                loop.call_soon_threadsafe(stream.put_nowait, exc)
            self._streams.clear()
            self._fail_pending(exc)

    def _run_commands(self) -> None:
        while True:
            try:
                kind, payload, future = self._commands.get_nowait()
            except queue.Empty:
                return
            # a caller that stopped waiting cancelled its future: skip its add, still abort
            if not future.set_running_or_notify_cancel() and kind == "add":
                continue
            try:
                if kind == "add":
                    request_id, prompt, params, loop, stream = payload
                    self.engine.add_request(request_id, prompt, params)
                    self._streams[request_id] = (loop, stream)
                elif kind == "abort":
                    self.engine.abort_request(payload)
                    self._streams.pop(payload, None)
                if future.running():
                    future.set_result(None)
            except Exception as exc:  # a bad request fails only its own caller
                if future.running():
                    future.set_exception(exc)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            target = self._streams.get(output.request_id)
            if target is None:
                continue
            if output.finished:
                del self._streams[output.request_id]
            loop, stream = target
            loop.call_soon_threadsafe(stream.put_nowait, output)

    def _fail_pending(self, exc: BaseException) -> None:
        while True:
            try:
                _, _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(EngineDeadError(f"the engine step loop failed: {exc!r}"))
