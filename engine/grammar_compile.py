"""Compiling constraints with xgrammar: canonical keys, a bounded cache, clear errors.

`GrammarCompileCache.get(params)` turns a `StructuredOutputsParams` into an xgrammar
`CompiledGrammar`, once per distinct constraint and tokenizer; a bad schema, regex, EBNF grammar
or structural tag raises `ValueError` naming it. JSON grammars never allow unbounded whitespace
(structural tags get at most one whitespace character between JSON tokens), their strings
never allow raw control characters, and their numbers are bounded unless the request turns
`bound_numbers` off (engine/json_schema_rules.py). A JSON schema using a keyword the grammar
does not enforce raises `ValueError` naming the keyword and its path, unless `best_effort`.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import xgrammar as xgr
from thinkgate.engine.json_schema_rules import (
    bound_number_rules,
    bound_schema_numbers,
    unenforced_keywords,
)
from thinkgate.engine.sampling_params import StructuredOutputsParams

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
                 bound_numbers: bool = True) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.tokenizer_info = tokenizer_info
        self.tokenizer_key = tokenizer_key
        self.max_entries = max_entries
        self.bound_numbers = bound_numbers  # the default when a request leaves it None
        # xgrammar's own cache is unbounded; ours replaces it.
        self._compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=max_threads,
                                             cache_enabled=False)
        self._entries: OrderedDict[tuple[str, str, str], tuple[xgr.CompiledGrammar, bool]] = \
            OrderedDict()
        # `prefetch` compiles on two worker threads (xgrammar releases the GIL while it
        # compiles), so a slow schema never stalls the step loop and one slow schema does not
        # hold up every other new one. The lock guards `_entries` and `_inflight`.
        self._lock = threading.RLock()  # _track runs under it; a done future calls back at once
        self._inflight: dict[tuple[str, str, str], Future[Any]] = {}
        self._jobs: set[Future[Any]] = set()  # every compile this cache has queued or running
        self.num_hits = 0
        self.num_misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
        """The compiled grammar of `params`; `ValueError` naming the constraint when it is bad."""
        return self.get_entry(params)[0]

    def get_entry(self, params: StructuredOutputsParams) -> tuple[xgr.CompiledGrammar, bool]:
        """(compiled grammar, whether it has free-form JSON objects, whose keys may repeat);
        compiles here, on the calling thread, unless `prefetch` already did."""
        key, kind, text, bound = self._key(params)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self.num_hits += 1
                self._entries.move_to_end(key)
                return found
            pending = self._inflight.get(key)
        if pending is not None:
            return pending.result()
        return self._compile_entry(key, kind, text, params, bound)

    def prefetch(self, params: StructuredOutputsParams) -> Future[Any] | None:
        """Start compiling `params` on a worker thread: the future of its entry, or None when it
        is cached. A constraint that fails the checks before xgrammar raises `ValueError` here
        (for a large JSON schema, whose checks take tens of ms, they run on the thread too); a
        compile error is the future's exception."""
        if _large_schema(params):
            return self._track(_compile_pool().submit(self._resolve, params))
        key, kind, text, bound = self._key(params)
        with self._lock:
            if key in self._entries:
                return None
            pending = self._inflight.get(key)
            if pending is None:
                pending = self._track(_compile_pool().submit(
                    self._compile_entry, key, kind, text, params, bound))
                self._inflight[key] = pending
        return pending

    def _resolve(self, params: StructuredOutputsParams) -> tuple[xgr.CompiledGrammar, bool]:
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
        return (self.tokenizer_key, f"{kind}|{int(bound)}", text), kind, text, bound

    def _compile_entry(self, key: Any, kind: str, text: str, params: StructuredOutputsParams,
                       bound: bool) -> tuple[xgr.CompiledGrammar, bool]:
        with self._lock:
            self.num_misses += 1
        try:
            compiled = self._compile(kind, text, params, bound)
            entry = (compiled, kind == "json_object" or (
                kind in ("json", "structural_tag", "grammar") and _has_free_objects(compiled)))
            with self._lock:
                self._entries[key] = entry
                if len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return entry
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def _compile(self, kind: str, text: str, params: StructuredOutputsParams,
                 bound: bool) -> xgr.CompiledGrammar:
        any_ws = not params.disable_any_whitespace
        try:
            if kind in ("json", "json_object", "structural_tag"):
                grammar = (xgr.Grammar.from_structural_tag(text) if kind == "structural_tag"
                           else xgr.Grammar.from_json_schema(text, any_whitespace=any_ws))
                return self._compiler.compile_grammar(json_grammar_text(grammar, bound))
            if kind == "regex":
                return self._compiler.compile_regex(text)
            return self._compiler.compile_grammar(text)  # grammar, choice
        except (RuntimeError, ValueError, TypeError) as err:
            raise ValueError(f"invalid structured_outputs.{kind} {_short(text)}: "
                             f"{_xgrammar_reason(err)}") from None


def _has_free_objects(compiled: xgr.CompiledGrammar) -> bool:
    """Whether a rule of the grammar's own (not xgrammar's `basic_*` library) uses its
    free-form object or any-value rule."""
    return any(("basic_object" in line or "basic_any" in line)
               for line in str(compiled.grammar).splitlines()
               if not line.startswith("basic_"))


# xgrammar (0.2.9) writes length-bounded JSON strings with this character class, which lets raw
# control characters (invalid JSON) into the string; its unbounded strings exclude them.
_LAX_JSON_CHAR = '[^\\"\\\\\\r\\n]'
_STRICT_JSON_CHAR = '[^\\0-\\x1f\\"\\\\\\r\\n]'


def strict_json_strings(ebnf: str) -> str:
    """An xgrammar-generated grammar whose JSON string characters exclude control characters."""
    return ebnf.replace(_LAX_JSON_CHAR, _STRICT_JSON_CHAR)


def json_grammar_text(grammar: xgr.Grammar, bound_numbers: bool = True) -> str:
    """The EBNF of an xgrammar JSON / structural-tag grammar with strict strings and (unless
    `bound_numbers` is False) bounded numbers."""
    text = strict_json_strings(str(grammar))
    return bound_number_rules(text) if bound_numbers else text


def check_enforceable(schema: Any, where: str = "structured_outputs.json") -> None:
    """ValueError naming each keyword of `schema` the grammar would not enforce (with its JSON
    path), and how to accept it anyway."""
    found = unenforced_keywords(schema)
    if found:
        raise ValueError(f"{where}: the grammar cannot enforce {'; '.join(found)}; remove it, "
                         "or set structured_outputs.best_effort to accept unenforced keywords")


def canonical_constraint(params: StructuredOutputsParams,
                         bound_numbers: bool = True) -> tuple[str, str]:
    """(kind, canonical text) of a constraint; checks JSON schemas before xgrammar sees them."""
    if params.is_options_only:
        raise ValueError("structured_outputs has options but no constraint (json, json_object, "
                         "regex, choice, grammar or structural_tag); options alone go with "
                         "response_format or tool_choice in a chat request")
    kind = params.kind
    if kind == "json":
        schema = _load_json(params.json, "json")
        if not isinstance(schema, dict | bool):
            raise ValueError(f"structured_outputs.json must be a JSON schema object, got "
                             f"{_short(json.dumps(schema))}")
        _check_schema(json.dumps(schema, separators=(",", ":")))
        if not params.best_effort:
            check_enforceable(schema)
        if bound_numbers:
            schema = bound_schema_numbers(schema)
        return kind, json.dumps(schema, separators=(",", ":"))
    if kind == "json_object":
        return kind, '{"type":"object"}'
    if kind == "choice":
        return kind, choice_ebnf(params.choice or [])
    if kind == "structural_tag":
        tag = _load_json(params.structural_tag, "structural_tag")
        if not params.best_effort:
            for schema, path in tag_schemas(tag):
                check_enforceable(schema, f"structured_outputs.structural_tag{path}")
        if params.disable_any_whitespace:
            tag = bound_json_whitespace(tag)
        if bound_numbers:
            tag = bound_tag_numbers(tag)
        return kind, json.dumps(tag, separators=(",", ":"))
    return kind, str(getattr(params, kind))


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def bound_json_whitespace(node: Any) -> Any:
    """A copy of a structural tag whose JSON parts allow at most one whitespace run character
    between tokens (xgrammar's default is unbounded, letting a model pad to max_tokens)."""
    if isinstance(node, list):
        return [bound_json_whitespace(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":  # its "json_schema" value is a schema: keep it as is
        return {"max_whitespace_cnt": 1, **node} if node.get("max_whitespace_cnt") is None else node
    return {k: bound_json_whitespace(v) for k, v in node.items()}


def tag_schemas(node: Any, path: str = "") -> list[tuple[Any, str]]:
    """(schema, path) of each json_schema element of a structural tag."""
    if isinstance(node, list):
        return [found for i, v in enumerate(node) for found in tag_schemas(v, f"{path}/{i}")]
    if not isinstance(node, dict):
        return []
    if node.get("type") == "json_schema":
        return [(node.get("json_schema"), f"{path}/json_schema")]
    return [found for k, v in node.items() for found in tag_schemas(v, f"{path}/{k}")]


def bound_tag_numbers(node: Any) -> Any:
    """A copy of a structural tag whose json_schema elements' numbers are bounded."""
    if isinstance(node, list):
        return [bound_tag_numbers(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":
        return {**node, "json_schema": bound_schema_numbers(node.get("json_schema"))}
    return {k: bound_tag_numbers(v) for k, v in node.items()}


def _load_json(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"structured_outputs.{name} is not valid JSON ({err}): "
                         f"{_short(value)}") from None


@functools.lru_cache(maxsize=256)
def _check_schema(text: str) -> None:
    """Validate a schema (canonical JSON text) against its meta-schema, once per distinct schema:
    a meta-schema check costs milliseconds, and most requests repeat a schema."""
    import jsonschema

    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"invalid structured_outputs.json schema: {err.message} "
                         f"(at {list(err.absolute_path)})") from None


def _xgrammar_reason(err: Exception) -> str:
    """xgrammar prefixes C++ messages with a timestamp and source position; keep the reason."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "] " in text and text.startswith("["):
        text = text.split("] ", 1)[1]
    if ": " in text and ".cc:" in text.split(": ", 1)[0]:
        text = text.split(": ", 1)[1]
    return text


def _short(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
