"""Compiling constraints: a bounded cache shared by both backends, compile threads, clear errors.

`GrammarCompileCache.get_entry(params)` turns a `StructuredOutputsParams` into a
`CompiledConstraint`, once per distinct canonical constraint (canonical.py) and tokenizer, with
the first backend that compiles it (backend.py: `auto`, or the one the engine was started
with); a bad schema, regex, EBNF grammar or structural tag, or one no backend enforces fully,
raises `ValueError` naming it. `prefetch` compiles on two lower-priority threads, off the step
loop. A hot JSON schema that xgrammar enforces exactly as llguidance moves to xgrammar's faster
masks once a background compile is done (`_promote`); not one whose objects llguidance takes in
any order (json_any_order.py), as xgrammar keeps the declared one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from thinkgate.engine.sampling_params import StructuredOutputsParams
from thinkgate.engine.structured.backend import (
    CompiledConstraint,
    backend_order,
    check_backend,
)
from thinkgate.engine.structured.canonical import (
    _check_schema,
    canonical_constraint,
)
from thinkgate.engine.structured.json_object_lark import may_reorder
from thinkgate.engine.structured.json_schema_rules import (
    closed_objects,
    map_tag_schemas,
    promotable,
    tag_schemas,
)
from thinkgate.engine.structured.xgrammar_backend import XGrammarBackend

if TYPE_CHECKING:
    import xgrammar as xgr

logger = logging.getLogger(__name__)

# The compile threads' nice value: on a busy CPU the step loop's threads (torch's intra-op
# pool among them, which waits at every barrier for a thread preempted by a compile) come
# first; the compile takes the cycles they leave. Measured on 2 cores, a 5 s compile beside a
# stream: nice 0 gave the stream gaps of 90-170 ms, nice 10 none over 50 ms.
NICE = 10


def _lower_priority(nice: int) -> None:
    """Run this thread at a lower CPU priority (Linux threads each have their own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not on Linux, or not allowed: normal priority
        pass


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _compile_pool() -> ThreadPoolExecutor:
    """The process's two compile threads, shared by every cache, started on first use. At exit
    Python waits for a compile still running (xgrammar's C++ must not be cut off mid-way)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar-compile",
                                       initializer=_lower_priority, initargs=(NICE,))
        return _POOL


SYNC_CHECK_CHARS = 8192  # JSON schemas up to this long are checked on the caller's thread
_KEYS_AHEAD = 128  # prefetched requests whose key waits for their get_entry


def _large_schema(params: StructuredOutputsParams) -> bool:
    if params.kind != "json":
        return False
    value = params.json
    return len(value if isinstance(value, str) else json.dumps(value)) > SYNC_CHECK_CHARS


def run_in_background(fn: Any, *args: Any) -> Future[Any]:
    """`fn(*args)` on a compile thread (at the compile threads' lower priority)."""
    return _compile_pool().submit(fn, *args)


class GrammarCompileCache:
    """Compiled grammars for one tokenizer, at most `max_entries` of them (least recently used
    are dropped). Keys are the constraint's kind plus its canonical text, so the same schema
    written with different key order or whitespace compiles once."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, tokenizer_key: str,
                 max_entries: int = 128, max_threads: int = 1,
                 bound_numbers: bool = True, backend: str = "xgrammar",
                 guidance: Callable[[], Any] | None = None,
                 disable_additional_properties: bool = False) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.backend = check_backend(backend)
        if backend != "xgrammar" and guidance is None:
            raise ValueError(f"structured_outputs_backend={backend!r} needs the llguidance "
                             "tokenizer (Grammar builds it)")
        self.tokenizer_info = tokenizer_info
        self.tokenizer_key = tokenizer_key
        self.max_entries = max_entries
        self.bound_numbers = bound_numbers  # the default when a request leaves it None
        self.closed_objects = disable_additional_properties
        self.xgrammar = XGrammarBackend(tokenizer_info, max_threads)
        self._guidance_factory = guidance
        self._guidance: Any = None  # built on first use (~1 s at 151k tokens): `guidance`
        self._guidance_lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, str], CompiledConstraint] = OrderedDict()
        # `prefetch` compiles on two worker threads (xgrammar releases the GIL while it
        # compiles), so a slow schema never stalls the step loop and one slow schema does not
        # hold up every other new one. The lock guards `_entries` and `_inflight`.
        self._lock = threading.RLock()  # _track runs under it; a done future calls back at once
        self._inflight: dict[tuple[str, str, str], Future[Any]] = {}
        self._jobs: set[Future[Any]] = set()  # every compile this cache has queued or running
        self.num_hits = 0
        self.num_misses = 0
        self.num_promoted = 0  # hot schemas moved from llguidance to xgrammar (`_promote`)
        self._promotion_tried: set[Any] = set()
        self.compiled_by: Counter[str] = Counter()  # constraints compiled, per backend
        # The key `prefetch` worked out, for the `get_entry` of the same request (the same params
        # object) to take instead of making the constraint canonical again (~2-5 ms for a
        # 150-tool tag): id(params) -> (params, key); taken once, at most _KEYS_AHEAD kept.
        self._keys_ahead: OrderedDict[int, tuple[StructuredOutputsParams, Any]] = OrderedDict()

    @property
    def guidance(self) -> Any:
        """The llguidance backend (its tokenizer built once, on first use)."""
        if self._guidance is None:
            with self._guidance_lock:  # not `_lock`: the step loop takes that one
                if self._guidance is None:
                    assert self._guidance_factory is not None
                    self._guidance = self._guidance_factory()
        return self._guidance

    def new_matcher(self, entry: CompiledConstraint) -> Any:
        """A fresh matcher at the start of `entry`'s grammar."""
        backend = self.xgrammar if entry.backend == "xgrammar" else self.guidance
        return backend.new_matcher(entry.grammar)

    def clear(self) -> None:
        """Drop every compiled entry (benchmarks' cold compiles)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, params: StructuredOutputsParams) -> Any:
        """The compiled grammar of `params`; `ValueError` naming the constraint when it is bad."""
        return self.get_entry(params).grammar

    def get_entry(self, params: StructuredOutputsParams) -> CompiledConstraint:
        """The cache entry of `params`; compiles here, on the calling thread, unless `prefetch`
        already did."""
        with self._lock:
            ahead = self._keys_ahead.pop(id(params), None)
        key, kind, text, bound = (ahead[1] if ahead is not None and ahead[0] is params
                                  else self._key(params))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self.num_hits += 1
                self._entries.move_to_end(key)
                if found.backend == "guidance" and key not in self._promotion_tried:
                    self._promote(key, kind, text, params, bound)
                return found
            pending = self._inflight.get(key)
        if pending is not None:
            return pending.result()
        return self._compile_entry(key, kind, text, params, bound)

    def _promote(self, key: Any, kind: str, text: str, params: StructuredOutputsParams,
                 bound: bool) -> None:
        """A hot JSON schema (asked for again) that xgrammar enforces exactly as llguidance
        (`promotable`, and no object llguidance takes in any order: `may_reorder`) is compiled
        by xgrammar on a compile thread; once ready, later requests get xgrammar's matchers,
        whose masks cost a fraction of llguidance's (running requests keep theirs). Called
        under the lock; at most once per cache entry."""
        if len(self._promotion_tried) > 4 * self.max_entries:
            self._promotion_tried.clear()
        self._promotion_tried.add(key)
        if (self.backend != "auto" or kind != "json" or not params.disable_any_whitespace
                or len(text) > SYNC_CHECK_CHARS or not promotable(schema := json.loads(text))
                or may_reorder(schema)):
            return

        def compile_with_xgrammar() -> None:
            start = time.perf_counter()
            try:
                grammar, free = self.xgrammar.compile(kind, text, any_whitespace=False,
                                                      bound_numbers=bound, best_effort=False)
            except ValueError as err:
                logger.debug("structured output: no promotion to xgrammar: %s", err)
                return
            with self._lock:
                if key in self._entries:
                    self._entries[key] = CompiledConstraint("xgrammar", grammar, free)
                    self.num_promoted += 1
            logger.debug("structured output: a hot json constraint moved to xgrammar (%.0f ms "
                         "compile)", (time.perf_counter() - start) * 1e3)

        self._track(_compile_pool().submit(compile_with_xgrammar))

    def prefetch(self, params: StructuredOutputsParams) -> Future[Any] | None:
        """Start compiling `params` on a worker thread: the future of its entry, or None when it
        is cached. A constraint that fails the checks before xgrammar raises `ValueError` here
        (for a large JSON schema, whose checks take tens of ms, they run on the thread too); a
        compile error is the future's exception."""
        if _large_schema(params):
            return self._track(_compile_pool().submit(self._resolve, params))
        key, kind, text, bound = self._key(params)
        with self._lock:
            self._keys_ahead[id(params)] = (params, (key, kind, text, bound))
            if len(self._keys_ahead) > _KEYS_AHEAD:
                self._keys_ahead.popitem(last=False)
            if key in self._entries:
                return None
            pending = self._inflight.get(key)
            if pending is None:
                pending = self._track(_compile_pool().submit(
                    self._compile_entry, key, kind, text, params, bound))
                self._inflight[key] = pending
        return pending

    def _resolve(self, params: StructuredOutputsParams) -> CompiledConstraint:
        """`get_entry` for a worker thread: never waits on another compile (both threads could
        otherwise wait on jobs queued behind them)."""
        key, kind, text, bound = self._key(params)
        with self._lock:
            found = self._entries.get(key)
        return found if found is not None else self._compile_entry(key, kind, text, params,
                                                                   bound)

    def _track(self, future: Future[Any]) -> Future[Any]:
        with self._lock:
            self._jobs.add(future)
        future.add_done_callback(self._untrack)
        return future

    def _untrack(self, future: Future[Any]) -> None:
        with self._lock:
            self._jobs.discard(future)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no compile of this cache is queued or running; whether that happened in
        time."""
        with self._lock:
            pending = list(self._jobs)
        done, _ = wait(pending, timeout=timeout_s)
        return len(done) == len(pending)

    def _key(self, params: StructuredOutputsParams) -> tuple[Any, str, str, bool]:
        bound = self.bound_numbers if params.bound_numbers is None else params.bound_numbers
        kind, text = canonical_constraint(params, bound)
        if self.closed_objects and kind in ("json", "structural_tag"):
            closed = (closed_objects(json.loads(text)) if kind == "json"
                      else map_tag_schemas(json.loads(text), closed_objects))
            text = json.dumps(closed, separators=(",", ":"))
        return (self.tokenizer_key, f"{kind}|{int(bound)}|{int(params.best_effort)}"
                f"|{int(params.disable_any_whitespace)}|{self.backend}", text), kind, text, bound

    def _compile_entry(self, key: Any, kind: str, text: str, params: StructuredOutputsParams,
                       bound: bool) -> CompiledConstraint:
        with self._lock:
            self.num_misses += 1
        try:
            entry = self._compile(kind, text, params, bound)
            with self._lock:
                self.compiled_by[entry.backend] += 1
                self._entries[key] = entry
                if len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return entry
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def _compile(self, kind: str, text: str, params: StructuredOutputsParams,
                 bound: bool) -> CompiledConstraint:
        """The first backend of `backend_order` that compiles the constraint; when each
        refuses it, `ValueError` with each one's reason (xgrammar's names the keyword and its
        path)."""
        refusals = []
        any_ws = not params.disable_any_whitespace
        for name in backend_order(kind, self.backend):
            start = time.perf_counter()
            try:
                if name == "xgrammar":
                    if kind == "json":
                        # against the meta-schema: ~300 ms for a 150 KB schema, so only here
                        # (llguidance checks a schema's structure itself, and refuses it)
                        _check_schema(text)
                    elif kind == "structural_tag":
                        for schema, _ in tag_schemas(json.loads(text)):
                            _check_schema(json.dumps(schema, separators=(",", ":")))
                    grammar, free = self.xgrammar.compile(
                        kind, text, any_whitespace=any_ws, bound_numbers=bound,
                        best_effort=params.best_effort)
                else:
                    grammar, free = self.guidance.compile(kind, text, any_ws, bound)
            except ValueError as err:
                refusals.append((name, str(err)))
                logger.debug("structured output: %s refused the %s constraint: %s", name, kind,
                             err)
                continue
            logger.debug("structured output: %s constraint compiled by %s in %.1f ms%s", kind,
                         name, (time.perf_counter() - start) * 1e3,
                         f" (after {refusals[0][0]} refused it)" if refusals else "")
            return CompiledConstraint(name, grammar, free,
                                      grammar.raw_names if name == "guidance" else frozenset())
        if len(refusals) == 1:
            raise ValueError(refusals[0][1])
        first = next((r for r in refusals if r[0] == "xgrammar"), refusals[0])
        others = "; ".join(f"{n}: {why}" for n, why in refusals if n != first[0])
        raise ValueError(f"{first[1]} (also refused by {others})")
