"""The grammar backend interface, and which backend compiles which constraint.

A backend (xgrammar_backend.py, guidance_backend.py) compiles a canonical constraint into what
its matchers start from, and makes one matcher per request. Everything the engine asks of a
matcher goes through `Matcher` (xgrammar's method names): the batch bitmask, the reasoning gate,
jump-forward, the repeated-key checks and `complete_before_max_tokens` work on either backend.

`auto` (the default) picks per constraint from the table in `AUTO_ORDER`, measured on MaskBench's
real-world schemas on the Qwen vocabulary (benchmarks/bench_maskbench.py, RESULTS.md): a backend
is tried only after the ones before it refused the constraint, so the first one that enforces it
fully compiles it. llguidance goes first for JSON schemas and regexes: it refuses every keyword
it does not enforce (never an output that fails its schema), enforces more of JSON Schema
(additional properties, `oneOf` it can tell apart, formats) and compiles in about a millisecond
where xgrammar may take seconds. It goes first for structural tags (tool calls) too, written as
lark (lark_tags.py): a tool set compiles in milliseconds where xgrammar's tag compile takes
~0.5 s a tool; the tags only xgrammar writes (the MiniMax-M3 XML and Gemma 4 call styles) fall
back to it. xgrammar goes first for EBNF grammars and choices (its EBNF dialect is the one the
API documents).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch

BACKENDS = ("auto", "xgrammar", "guidance")

AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "json": ("guidance", "xgrammar"),
    "json_object": ("guidance", "xgrammar"),
    "regex": ("guidance", "xgrammar"),
    "choice": ("xgrammar", "guidance"),
    "grammar": ("xgrammar", "guidance"),
    "structural_tag": ("guidance", "xgrammar"),
}
# What a backend named explicitly cannot compile goes to the other one.
_ONLY: dict[str, str] = {}


def check_backend(name: str) -> str:
    """`name` if it is a backend choice; ValueError naming it otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"structured_outputs_backend must be one of {', '.join(BACKENDS)}; "
                         f"got {name!r}")
    return name


def backend_order(kind: str, choice: str) -> tuple[str, ...]:
    """The backends to try for a constraint of `kind`, in order, under the `choice` setting."""
    if choice == "auto":
        return AUTO_ORDER[kind]
    return (_ONLY.get(kind, choice),)


class CompiledConstraint(NamedTuple):
    """A cache entry: which backend compiled it, its compiled form, whether its outputs
    may hold free-form JSON objects (whose keys the repeated-key checks watch), and the
    property names the key checks have written as is (`open_non_ascii_names`)."""

    backend: str
    grammar: Any
    free_objects: bool
    raw_names: frozenset[str] = frozenset()


class Matcher(Protocol):
    """One request's grammar state (an `xgr.GrammarMatcher`, or `GuidanceMatcher`)."""

    def accept_token(self, token_id: int) -> bool: ...
    def accept_string(self, text: str) -> bool: ...
    def rollback(self, num_tokens: int) -> Any: ...
    def is_terminated(self) -> bool: ...
    def is_completed(self) -> bool: ...
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> Any: ...
    def find_jump_forward_string(self) -> str: ...
    def find_jump_forward_tokens(self) -> Any: ...
    def fork(self) -> Any: ...
