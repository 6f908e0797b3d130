"""The engine core process: the step loop alone in its process, talking over one pipe.

    parent -> core   ("add", request_id, prompt, params) | ("abort", request_id) | ("shutdown",)
    core -> parent   ("ready", info) | ("failed", error) at start, then
                     ("out", [packed output, ...], stats)  one message per step with outputs
                     ("reject", request_id, error, stats)  an add the engine refused (also
                                                          later: its grammar failed to compile)
                     ("stats", stats)                      after commands that changed nothing else
                     ("dead", text)                        the step loop raised; the core exits
                     ("many", [message, ...])               several of the above, in order

A packed output is `(request_id, finished, [(index, text, token_ids, cumulative_logprob,
logprobs, finish_reason, stop_reason, trace), ...])` (trace: None unless the request asked): only what the step added (DELTA outputs), never
the prompt, so a message costs what the step produced. The core never waits for the parent
while it has work: commands are read between steps (`poll(0)`). A small message goes out from
the step loop itself when nothing is queued and the pipe has room (a write that cannot block);
otherwise it goes to a sender thread, which sends whatever queued up while the pipe was busy
as one "many" message (a slow reader gets fewer, larger messages; the step loop never blocks
on it). Handing every message to the thread cost ~100 us per step at batch 1 (the two
threads trading the GIL), 8% of a demo-model token. An idle core
blocks on the pipe; a closed pipe (the parent exited) ends the core.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import sys
import threading
from dataclasses import replace
from multiprocessing.reduction import ForkingPickler
from typing import Any

logger = logging.getLogger(__name__)

CompletionTuple = tuple[int, str, list[int], float | None, Any, str | None, Any, Any]
PackedOutput = tuple[str, bool, list[CompletionTuple], int]  # ..., num_cached_tokens
_DIRECT_BYTES = select.PIPE_BUF  # messages up to this size may leave from the step loop


def pack(output: Any) -> PackedOutput:
    """A RequestOutput's per-step part as plain tuples."""
    return (output.request_id, output.finished,
            [(c.index, c.text, c.token_ids, c.cumulative_logprob, c.logprobs, c.finish_reason,
              c.stop_reason, c.trace) for c in output.outputs], output.num_cached_tokens)


def run_engine_core(conn: Any, spec: dict[str, Any]) -> None:
    """Process entry point: build the engine from `spec`, answer "ready", then run the loop.

    Ctrl-C reaches the whole process group; the parent decides when the core stops (it sends
    "shutdown", or its end closes the pipe), so the core ignores SIGINT."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=spec.get("log_level", logging.INFO),
                        format="%(asctime)s %(levelname)s [engine-core] %(name)s: %(message)s")
    try:
        engine = _build(spec)
    except BaseException as exc:  # the parent re-raises it (a bad model path is a ValueError)
        conn.send(("failed", _portable(exc)))
        return
    conn.send(("ready", {"tokenizer": engine.tokenizer, "max_model_len": engine.max_model_len,
                         "vocab_size": engine.vocab_size, "stats": engine.stats(),
                         "pid": os.getpid()}))
    sender = _Sender(conn)
    try:
        _loop(conn, engine, sender.send)
    except (EOFError, OSError, KeyboardInterrupt):  # the parent went away: nothing to report to
        return
    except BaseException as exc:
        logger.exception("engine step loop failed")
        sender.send(("dead", f"{type(exc).__name__}: {exc}"))
        sender.close()
        raise SystemExit(1) from exc
    sender.close()
    # A clean stop: nothing is left to release that the OS does not, and the interpreter's
    # finalization of torch, Triton and the grammar libraries costs ~1 s of every shutdown.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _Sender:
    """Sends the core's messages: directly when that cannot block, else from a thread of its
    own that batches what queued up. Messages keep their order: the direct path is taken
    only while the thread has nothing queued or in flight."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # messages handed to the thread and not yet written
        self._closed = False
        self._poll = select.poll()
        self._poll.register(conn.fileno(), select.POLLOUT)
        self._thread = threading.Thread(target=self._run, name="engine-core-sender", daemon=True)
        self._thread.start()

    def send(self, message: tuple[Any, ...]) -> None:
        if self._closed:
            return
        with self._lock:
            direct = self._pending == 0
            if not direct:
                self._pending += 1
        if direct:
            data = ForkingPickler.dumps(message)
            # POLLOUT: the pipe (PIPE_BUF bytes free) or socket (half its buffer free) takes
            # a write this small, with its 4-byte header, at once
            if len(data) + 4 <= _DIRECT_BYTES and self._poll.poll(0):
                try:
                    self._conn.send_bytes(data)
                except OSError:  # the parent went away
                    self._closed = True
                return
            with self._lock:
                self._pending += 1
        self._queue.put(message)

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = batch[-1] is None
            batch = [m for m in batch if m is not None]
            try:
                if len(batch) == 1:
                    self._conn.send(batch[0])
                elif batch:
                    self._conn.send(("many", batch))
            except OSError:  # the parent went away
                self._closed = True
                return
            finally:
                with self._lock:
                    self._pending -= len(batch)
            if done:
                return


def _build(spec: dict[str, Any]) -> Any:
    import torch
    from thinkgate.engine.core.llm_engine import LLMEngine
    from thinkgate.engine.structured.constrained import ConstrainedDecoding
    from thinkgate.parsers import load_plugin

    config = spec["config"]
    for path in spec.get("plugins", ()):
        load_plugin(path)
    engine = LLMEngine(config, compile_now=False)  # compiled code is per thread count
    engine.structured_output = ConstrainedDecoding.for_engine(engine, spec.get("reasoning_parser"))
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    elif engine.device.type == "cpu":
        weight_bytes = model_weight_bytes(engine.loaded.model, engine.loaded.dtype)
        threads = default_core_threads(weight_bytes)
        torch.set_num_threads(threads)
        available = available_cores()
        if available > threads:
            engine.runner.prefill_threads = available  # long prefills: long_forward.py
        logger.info("engine core: %d torch threads, %d for long prefills (%.0f MB of weights, "
                    "GOMP_SPINCOUNT %s)", threads, max(threads, available),
                    weight_bytes / 1e6, os.environ.get("GOMP_SPINCOUNT", "default"))
    engine.compile_decode_step()
    return engine


SMALL_MODEL_BYTES = 32 << 20
# libgomp's spins at a barrier before it sleeps (its default: 300,000): see `core_env`
BARRIER_SPINS = "10000"


def model_weight_bytes(model: Any, dtype: Any) -> int:
    """Bytes of the model's weights: its parameters plus the oneDNN-packed projections (which
    hold their weight outside the parameters) and GGUF projections kept int4 (buffers)."""
    import torch
    from thinkgate.engine.model.layers.packed_linear import PackedLinear
    from thinkgate.engine.model.layers.quant_linear import (
        DenseMatmul,
        Int4Matmul,
        TritonInt4Matmul,
    )

    total = sum(p.numel() * p.element_size() for p in model.parameters())
    item = torch.empty((), dtype=dtype).element_size()
    for module in model.modules():
        if isinstance(module, PackedLinear):
            total += module.in_features * module.out_features * item
        elif isinstance(module, (Int4Matmul, TritonInt4Matmul, DenseMatmul)):  # GGUF, quantized
            total += sum(b.numel() * b.element_size() for b in module.buffers(recurse=False))
    return total


def core_env(config: Any, threads: int | None) -> dict[str, str]:
    """Environment the core process starts with. A core that will step a small model on one
    thread and widen its long prefills to every core (`default_core_threads`,
    `long_forward.wide_forward`) spins only briefly at OpenMP barriers (`GOMP_SPINCOUNT`, then
    it sleeps): with libgomp's default spin, a two-thread prefill beside any other busy process
    stalls on the preempted thread. Measured on the 2-core machine, 1,600-token chat prompts
    through the server, demo model, medians of 8 (quiet / two busy processes beside it):
    libgomp's default spin 53-62 / 164-184 ms, spin 10,000 54-55 / 106-110, passive 60-67 /
    91-97, one thread 82-89 / 123-128 (benchmarks/RESULTS.md). Its decode steps run one
    thread, so they have no barriers to wait at. Set from the checkpoint's size on disk, since
    OpenMP reads it once, before the model is loaded; a user's own OpenMP wait setting wins."""
    if threads or available_cores() < 2:
        return {}
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return {}
    if getattr(config, "device", "auto") not in ("auto", "cpu"):
        return {}
    import torch
    from thinkgate.engine.model.model_loader import resolve_model_path

    if config.device == "auto" and torch.cuda.is_available():
        return {}
    try:
        folder, gguf = resolve_model_path(config.model)
    except (OSError, ValueError):
        return {}  # the core reports it
    files = [folder / gguf] if gguf else list(folder.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)
    if not files or size >= SMALL_MODEL_BYTES:
        return {}
    return {"GOMP_SPINCOUNT": BARRIER_SPINS}


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_core_threads(weight_bytes: int) -> int:
    """Torch threads of a CPU engine core. A model under `SMALL_MODEL_BYTES` of weights steps
    so fast that the API process (HTTP, JSON, parsing: ~0.15-0.4 ms of CPU per token) needs a
    core of its own, so the core takes every core but one: two OpenMP threads sharing a core
    with a busy API process stall each other (the 11 MB demo model on this project's 2-core
    machine under load: 16 tok/s at batch 1 with 2 threads, 242 with 1). A larger model is
    bound by weight traffic and leaves the API process mostly idle, so it takes every core
    (SmolLM2-135M, 270 MB in bf16, server: 15.7 -> 22.0 tok/s at concurrency 1 and
    88-112 -> 127-136 at 8 with 2 threads instead of 1)."""
    available = available_cores()
    if weight_bytes >= SMALL_MODEL_BYTES:
        return available
    return max(1, available - 1)


def _loop(conn: Any, engine: Any, send: Any) -> None:
    from thinkgate.engine.sampling_params import RequestOutputKind

    while True:
        busy = engine.has_unfinished_requests()
        if conn.poll(0 if busy else None):
            changed = False
            while True:
                message = conn.recv()
                kind = message[0]
                if kind == "shutdown":
                    return
                if kind == "add":
                    _, request_id, prompt, params = message
                    try:
                        params = replace(params, output_kind=RequestOutputKind.DELTA)
                        engine.add_request(request_id, prompt, params)
                    except Exception as exc:  # a bad request fails only its own caller
                        send(("reject", request_id, _portable(exc), engine.stats()))
                elif kind == "abort":
                    engine.abort_request(message[1])
                    changed = True
                if not conn.poll(0):
                    break
            if changed and not engine.has_unfinished_requests():
                send(("stats", engine.stats()))
        if engine.has_unfinished_requests():
            outputs = engine.step()
            if outputs:
                send(("out", [pack(o) for o in outputs], engine.stats()))
            for request_id, exc in engine.take_rejected():  # its grammar failed to compile
                send(("reject", request_id, _portable(exc), engine.stats()))
            if not outputs and not engine.has_unfinished_requests():
                send(("stats", engine.stats()))


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
