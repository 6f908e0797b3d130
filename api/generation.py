"""One request through the async engine, as per-sample deltas, for both endpoints.

The only module of the server that calls the engine's generate/abort. It admits the request
(429 when the server is full), times its tokens for /metrics, turns the engine's outputs into
`SampleDelta`s, and aborts the request in the engine when the consumer stops early (a client
that disconnected), which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from thinkgate.api.errors import APIError, context_length_error
from thinkgate.api.metrics import RequestTimer
from thinkgate.engine.outputs import Logprob, RequestOutput
from thinkgate.engine.sampling_params import RequestOutputKind

logger = logging.getLogger(__name__)


@dataclass
class SampleDelta:
    """What one sample produced since the last delta."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    trace: list[tuple] | None = None  # engine/core/token_trace.py entries, when the request asked


@dataclass
class SampleState:
    """What the endpoint has seen of one sample so far (for cumulative engine outputs)."""

    num_chars: int = 0
    num_tokens: int = 0
    finish_reason: str | None = None


@dataclass
class RequestRun:
    """A submitted request: its id, prompt size and the deltas of its samples."""

    request_id: str
    num_prompt_tokens: int
    samples: list[SampleState] = field(default_factory=list)
    num_cached_tokens: int = 0  # prompt tokens the engine's prefix cache served

    @property
    def num_completion_tokens(self) -> int:
        return sum(s.num_tokens for s in self.samples)


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def check_length(num_prompt: int, max_new: int | None, max_model_len: int,
                 param: str = "messages") -> int:
    """The max_tokens to use: the request's, or what the context has left. 400 if it cannot fit."""
    room = max_model_len - num_prompt
    if max_new is None:
        if room < 1:
            raise context_length_error(num_prompt, 1, max_model_len, param)
        return room
    if num_prompt + max_new > max_model_len:
        raise context_length_error(num_prompt, max_new, max_model_len, param)
    return max_new


def _deltas(out: RequestOutput, run: RequestRun) -> list[SampleDelta]:
    """New text/tokens per sample of a DELTA-kind engine output."""
    deltas = []
    run.num_cached_tokens = max(run.num_cached_tokens, out.num_cached_tokens)
    for comp in out.outputs:
        while len(run.samples) <= comp.index:
            run.samples.append(SampleState())
        seen = run.samples[comp.index]
        if seen.finish_reason is not None:
            continue
        seen.num_chars += len(comp.text)
        seen.num_tokens += len(comp.token_ids)
        seen.finish_reason = comp.finish_reason
        if comp.text or comp.token_ids or comp.finish_reason is not None:
            lps = list(comp.logprobs) if comp.logprobs else None
            deltas.append(SampleDelta(comp.index, comp.text, list(comp.token_ids), lps,
                                      comp.finish_reason, comp.stop_reason,
                                      list(comp.trace) if comp.trace else None))
    return deltas


_END = object()


def _coalesce(deltas: list[SampleDelta]) -> list[SampleDelta]:
    """Merge consecutive deltas of the same sample into one (order of first appearance)."""
    merged: dict[int, SampleDelta] = {}
    for d in deltas:
        m = merged.get(d.index)
        if m is None:
            merged[d.index] = SampleDelta(d.index, d.text, list(d.token_ids),
                                          list(d.logprobs) if d.logprobs else None,
                                          d.finish_reason, d.stop_reason,
                                          list(d.trace) if d.trace else None)
            continue
        m.text += d.text
        m.token_ids += d.token_ids
        if d.logprobs:
            m.logprobs = (m.logprobs or []) + list(d.logprobs)
        if d.trace:
            m.trace = (m.trace or []) + list(d.trace)
        m.finish_reason, m.stop_reason = d.finish_reason, d.stop_reason
    return list(merged.values())


async def generate(
    state: Any, prompt_ids: list[int], params: Any, request_id: str, run: RequestRun,
    constraint_param: str | None = None,
) -> AsyncIterator[list[SampleDelta]]:
    """Yield lists of deltas until every sample finished; abort in the engine if closed early.

    The engine rejects a bad constraint (schema, regex, grammar) when the request is added;
    that ValueError becomes a 400 naming `constraint_param`, the field the constraint came from.
    """
    state.admit()
    timer = RequestTimer(state.metrics)
    state.metrics.prompt_tokens.inc(len(prompt_ids))
    params = replace(params, output_kind=RequestOutputKind.DELTA)
    pump = _EnginePump(state.engine, list(prompt_ids), params, request_id)
    finished = False
    try:
        while not finished:
            outs = await pump.next_batch()
            if not outs:
                break
            deltas = _coalesce([d for out in outs for d in _deltas(out, run)])
            finished = outs[-1].finished
            timer.tokens(sum(len(d.token_ids) for d in deltas))
            for d in deltas:
                if d.finish_reason is not None:
                    state.metrics.finish(d.finish_reason)
            if deltas:
                yield deltas
    except ValueError as exc:
        param = constraint_param if "structured_outputs" in str(exc) else None
        raise APIError(str(exc), param=param) from exc
    finally:
        state.release()
        timer.done()
        if not finished:
            logger.info("request %s stopped early; aborting it", request_id)
            pump.stop()


class _EnginePump:
    """Runs one engine request in its own task, so the HTTP handler's cancellation (a client
    that went away) never lands inside an engine call; `stop()` aborts it from outside."""

    def __init__(self, engine: Any, prompt_ids: list[int], params: Any, request_id: str) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.started = asyncio.Event()  # the engine accepted the request (first output came)
        self.task = asyncio.get_running_loop().create_task(
            self._run(engine, prompt_ids, params, request_id))

    async def _run(self, engine: Any, prompt_ids: list[int], params: Any, rid: str) -> None:
        try:
            async for out in engine.generate(prompt_ids, params, rid):
                self.started.set()
                self.queue.put_nowait(out)
            self.queue.put_nowait(_END)
        except Exception as exc:  # handed to the consumer, which raises it
            self.queue.put_nowait(exc)
        finally:
            self.started.set()

    async def next_batch(self) -> list[RequestOutput]:
        """Every output that has arrived (waits for one); empty when the request ended.

        Under load the event loop falls behind the engine; taking all queued outputs at once
        sends one chunk per sample instead of one per token."""
        items = [await self.queue.get()]
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        outs = []
        for item in items:
            if isinstance(item, Exception):
                raise item
            if item is not _END:
                outs.append(item)
        return outs

    def stop(self) -> None:
        """Cancel the request once the engine has it (cancelling mid-add would race the add)."""
        if self.task.done():
            return

        async def cancel_when_started() -> None:
            await self.started.wait()
            self.task.cancel()  # the engine's generator aborts the request as it closes

        task = asyncio.get_running_loop().create_task(cancel_when_started())
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[asyncio.Task[Any]] = set()  # strong refs to fire-and-forget tasks


async def merge(
    streams: list[AsyncIterator[list[SampleDelta]]],
) -> AsyncIterator[tuple[int, list[SampleDelta]]]:
    """Interleave several requests' streams as (stream index, deltas); closing cancels them all."""
    if len(streams) == 1:
        try:
            async for item in streams[0]:
                yield 0, item
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done = object()

    async def pump(i: int, stream: AsyncIterator[list[SampleDelta]]) -> None:
        try:
            async for item in stream:
                await queue.put((i, item))
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put((i, exc))
        await queue.put((i, done))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            i, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def cancel_on_disconnect(request: Any, work: Any) -> Any:
    """Await `work` (a coroutine) unless the HTTP client goes away first; then cancel it and
    return None (the request is aborted in the engine by `generate`'s cleanup)."""
    task = asyncio.ensure_future(work)

    async def wait_disconnect() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(wait_disconnect())
    try:
        await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()
