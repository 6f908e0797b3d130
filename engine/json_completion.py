"""Completion before max_tokens: the shortest valid ending of a matcher's state, and forcing it.

`shortest_completion(matcher, in_string)` searches a fork of an xgrammar matcher one character at
a time for a short text that completes the grammar: it takes the grammar's forced characters
(jump-forward) when there are any, else the first accepted character of a preference order
that closes values early (inside a JSON string: the closing quote first, then the separators
of string formats; outside: `}` `]` `,` `0` `"`; then any printable ASCII), a kind of
character (digits, letters) just written three times in a row going last. It is greedy, so short rather than provably shortest, and it
costs a few microseconds per character (no bitmask fills).

`CompletionPlanner` keeps, per request, a token plan that completes the grammar from the
current state and fits in the tokens left:

- far from max_tokens it re-plans every few steps (the plan's length estimates the danger);
- within `window` tokens of the plan's length it re-plans after every token; a sampled token
  after which no completion fits any more is replaced by the plan's next token (the matcher
  rolls back one token), and from then on the plan is forced, one token per step;
- when the plan's length equals the tokens left it is forced too; an output that is already
  complete, where the sampled id would start more than fits (a second tool call), ends with
  the stop id instead.

The request then ends with finish_reason "length" and stop_reason "completed_at_max_tokens".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import xgrammar as xgr

COMPLETED_STOP_REASON = "completed_at_max_tokens"
_IN_STRING = '"' + "@.:-TZ+/a0"
_OUTSIDE = '}],:0"'
_ANY = "".join(chr(c) for c in range(32, 127))


def _kind(ch: str) -> str:
    return "digit" if ch.isdigit() else "letter" if ch.isalpha() else ch


@functools.lru_cache(maxsize=64)
def _order(in_string: bool, escaped: bool, tired: str) -> str:
    """Characters to try, best first; `tired`: a kind written three times, tried last."""
    if escaped:
        order = _ANY
    else:
        first = _IN_STRING if in_string else _OUTSIDE
        order = first + "".join(c for c in _ANY if c not in first)
    if tired:
        order = "".join(c for c in order if _kind(c) != tired) + "".join(
            c for c in order if _kind(c) == tired)
    return order


def scan_string_state(text: str, in_string: bool, escaped: bool) -> tuple[bool, bool]:
    """(in_string, escaped) after `text`, from JSON's lexical rules (quotes and backslashes)."""
    for ch in text:
        if escaped:
            escaped = False
        elif in_string and ch == "\\":
            escaped = True
        elif ch == '"':
            in_string = not in_string
    return in_string, escaped


def shortest_completion(matcher: xgr.GrammarMatcher, in_string: bool = False,
                        escaped: bool = False, max_chars: int = 512) -> str | None:
    """A short text after which `matcher`'s grammar is complete (None past `max_chars`)."""
    m = matcher.fork()
    out: list[str] = []
    length, last, repeats = 0, "", 0
    while not m.is_completed():
        if length >= max_chars:
            return None
        piece = m.find_jump_forward_string()
        if not piece or not m.accept_string(piece):
            # after three of a kind (digits, letters) that kind goes last: it may loop (the
            # digits of a fraction, a free-form part) where another character ends the value
            order = _order(in_string, escaped, last if repeats >= 3 else "")
            piece = next((c for c in order if m.accept_string(c)), "")
            if not piece:
                return None
        kind = _kind(piece[-1])
        repeats = repeats + 1 if kind == last and len(piece) == 1 else 1
        last = kind
        out.append(piece)
        length += len(piece)
        in_string, escaped = scan_string_state(piece, in_string, escaped)
    return "".join(out)


class CompletionPlanner:
    """One request's plan (see the module docstring). `encode(text) -> ids` is the tokenizer's
    encoding without special tokens; `decode(id) -> text` one token's text."""

    def __init__(self, encode: Callable[[str], list[int]], decode: Callable[[int], str],
                 stop_id: int, window: int = 16, every: int = 8) -> None:
        self.encode, self.decode = encode, decode
        self.stop_id = stop_id  # ends a complete output the sampled id would reopen
        self.window, self.every = window, every
        self.plan: list[int] | None = None  # completes the grammar from the current state
        self.estimate = 0  # the length of the last plan
        self.forcing = False
        self.gave_up = False
        self.replaced = 0  # sampled tokens replaced by the plan's
        self._in_string = False
        self._escaped = False
        self._since_plan = 0
        self._undo = (False, False)

    @property
    def forced_token(self) -> int | None:
        """The token this step must write, or None (sample freely)."""
        return self.plan[0] if self.forcing and self.plan else None

    def start(self, matcher: xgr.GrammarMatcher) -> None:
        """Plan from the grammar's start; a grammar whose completion is not found (longer than
        `shortest_completion`'s max_chars) is left alone."""
        self.plan = self._plan(matcher)
        self.estimate = len(self.plan) if self.plan is not None else 0
        self.gave_up = self.plan is None

    def accept(self, matcher: xgr.GrammarMatcher, token: int, left: int) -> tuple[int, bool]:
        """Advance `matcher` with the sampled `token`, `left` tokens remaining after it; the
        token actually written (the plan's when the sampled one leaves no room) and whether the
        matcher accepted it. Call `finished` after."""
        if self.gave_up:
            return token, matcher.accept_token(token)
        if self.forcing and self.plan:
            token = self.plan.pop(0)
            return token, self._advance(matcher, token)
        near = left <= self.estimate + self.window
        before = self.plan if near else None
        if near and before is None:
            before = self._plan(matcher)
            if before is None:
                self.gave_up = True
                return token, matcher.accept_token(token)
        if not self._advance(matcher, token):
            return token, False
        self._since_plan += 1
        if not near and self._since_plan < self.every:
            self.plan = None
            return token, True
        after = self._follow(matcher, before, token) if before is not None else None
        if after is None or len(after) >= left:  # decisions are taken on a fresh plan
            fresh = self._plan(matcher)
            if after is None or (fresh is not None and len(fresh) < len(after)):
                after = fresh
        if after is not None and len(after) <= left:
            self.plan, self.estimate = after, len(after)
            self.forcing = near and 0 < len(after) >= left
            return token, True
        if before is None:  # too late to save: leave it as it was
            self.plan, self.gave_up = after, after is None
            return token, True
        matcher.rollback(1)
        self._in_string, self._escaped = self._undo
        self.replaced += 1
        self.plan, self.forcing = before[1:], True
        token = before[0] if before else self.stop_id  # complete already: end it here
        return token, self._advance(matcher, token)

    def take_forced(self, matcher: xgr.GrammarMatcher, limit: int) -> list[int]:
        """While forcing: the plan's ids but its last (at most `limit`), accepted by `matcher`,
        for the engine to write in one forward like jump-forward ids; the last one stays the
        next step's forced token, so the request still ends in `accept`."""
        if not self.forcing or not self.plan or len(self.plan) < 2 or limit <= 0:
            return []
        ids = self.plan[: min(len(self.plan) - 1, limit)]
        state = (self._in_string, self._escaped)
        for n, token in enumerate(ids):
            if not self._advance(matcher, token):  # not expected: the plan was checked
                if n:
                    matcher.rollback(n)
                self._in_string, self._escaped = state
                return []
        del self.plan[: len(ids)]
        return ids

    def note_forced(self, ids: list[int]) -> None:
        """Ids the matcher accepted outside `accept` (jump-forward): follow their text. The
        forced text starts every completion, so it never takes room a completion needs; the
        plan stays when it started with these ids, else the next step near max_tokens plans
        again (far from it the estimate stays until the next periodic plan)."""
        for token in ids:
            self._in_string, self._escaped = scan_string_state(
                self.decode(token), self._in_string, self._escaped)
        if self.plan is not None and self.plan[: len(ids)] == ids:
            del self.plan[: len(ids)]
            self.estimate = len(self.plan)
        else:
            self.plan = None

    def finished(self) -> bool:
        """The forced plan is written: the grammar is complete."""
        return self.forcing and not self.plan

    def _advance(self, matcher: xgr.GrammarMatcher, token: int) -> bool:
        self._undo = (self._in_string, self._escaped)
        if not matcher.accept_token(token):
            return False
        self._in_string, self._escaped = scan_string_state(self.decode(token), self._in_string,
                                                           self._escaped)
        return True

    def _follow(self, matcher: xgr.GrammarMatcher, before: list[int], token: int
                ) -> list[int] | None:
        """The plan of the state before `token` (just accepted), if it still completes the
        grammar from here: its tail when the token was its first id, else itself when the
        matcher accepts it (more characters of a free string or of a number leave the
        ending as it was). A couple of microseconds instead of a search."""
        if before and before[0] == token:
            return before[1:]
        return list(before) if _accepts(matcher, before) else None

    def _plan(self, matcher: xgr.GrammarMatcher) -> list[int] | None:
        self._since_plan = 0
        text = shortest_completion(matcher, self._in_string, self._escaped)
        if text is None:
            return None
        if not text:
            return []
        ids = self.encode(text)
        if _accepts(matcher, ids):
            return ids
        ids = [i for ch in text for i in self.encode(ch)]
        return ids if _accepts(matcher, ids) else None


def _accepts(matcher: xgr.GrammarMatcher, ids: list[int]) -> bool:
    """Whether `ids` complete `matcher`'s grammar; the matcher is rolled back after."""
    n = 0
    for token in ids:
        if not matcher.accept_token(token):
            break
        n += 1
    ok = n == len(ids) and matcher.is_completed()
    if n:
        matcher.rollback(n)
    return ok


def tokenizer_codec(tokenizer: Any) -> tuple[Callable[[str], list[int]], Callable[[int], str]]:
    """Cached encode/decode functions of a Hugging Face tokenizer for `CompletionPlanner`
    (completions and tokens repeat; the Rust tokenizer is used directly when there is one)."""
    fast = getattr(tokenizer, "backend_tokenizer", None)

    @functools.lru_cache(maxsize=4096)
    def encode_cached(text: str) -> tuple[int, ...]:
        if fast is not None:
            return tuple(fast.encode(text, add_special_tokens=False).ids)
        return tuple(tokenizer.encode(text, add_special_tokens=False))

    @functools.lru_cache(maxsize=65536)
    def decode(token: int) -> str:
        return tokenizer.decode([token])

    def encode(text: str) -> list[int]:
        return list(encode_cached(text))

    return encode, decode
