"""Completion before max_tokens: the shortest valid ending of a matcher's state, and forcing it.

`shortest_completion(matcher, in_string)` (completion_search.py) finds a short text that
completes a matcher's grammar from its state.

`CompletionPlanner` keeps, per request, a token plan that completes the grammar from the
current state and fits in the tokens left; a request whose max_tokens cannot hold the plan
from the grammar's start is refused (`ValueError`). After each sampled token it checks:

- on every token within `window` tokens (or twice the most a plan grew between two checks) of
  the plan's length, after any token that may have opened something (`scan_text`: a bracket,
  comma, quote or tag outside a string, an escape inside one), and every `every` tokens (or
  an eighth of the distance to max_tokens, when larger); other tokens (characters of a string or a number far from max_tokens) cost nothing;
- a check first tries the last plan on the new state (its tail when the token was its first
  id, else itself: writing more of a string or a number leaves the ending as it was; a couple
  of microseconds); only when that fails or no longer fits is a new plan searched;
- a sampled token after which no completion fits is replaced by the first id of the plan made
  before it (the matcher rolls back one token), and from then on the plan is forced;
- when the plan's length equals the tokens left it is forced too; an output that is already
  complete, where the sampled id would start more than fits (a second tool call), ends with
  the stop id instead. A forced plan is written like jump-forward ids (`take_forced`): all but
  its last id in one forward, the last one sampled under a one-id mask;
- jump-forward text near max_tokens is written only when a completion still fits after it
  (`note_forced`): its ids need not be the plan's, so they may take a token more.

The request then ends with finish_reason "length" and stop_reason "completed_at_max_tokens".
What is not covered: a completion that grows by more than the window between two checks far
from max_tokens without any opening character (letters inside a string that commit it to a
much longer enum value or key); the output is then cut as without the option. In tool
formats whose argument values are free text closed by a tag (qwen3_coder's `<parameter=...>`),
the search tries the structural tag's closing texts (`closers`) whole; a value in which the
model wrote an unmatched `"` reads as an open JSON string there, and gets no plan.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from thinkgate.engine.structured.backend import Matcher
from thinkgate.engine.structured.completion_search import scan_text, shortest_completion

logger = logging.getLogger(__name__)

COMPLETED_STOP_REASON = "completed_at_max_tokens"

class CompletionPlanner:
    """One request's plan (see the module docstring). `encode(text) -> ids` is the tokenizer's
    encoding without special tokens; `decode(id) -> text` one token's text."""

    def __init__(self, encode: Callable[[str], list[int]], decode: Callable[[int], str],
                 stop_id: int, window: int = 16, every: int = 8,
                 closers: tuple[str, ...] = ()) -> None:
        self.encode, self.decode = encode, decode
        self.closers = closers  # texts that end free text in a tool format (completion_search)
        self.stop_id = stop_id  # ends a complete output the sampled id would reopen
        self.window, self.every = window, every
        self.plan: list[int] | None = None  # completes the grammar from the current state
        self.estimate = 0  # the length of the last plan
        self.forcing = False
        self.gave_up = False
        self.replaced = 0  # sampled tokens replaced by the plan's
        self._in_string = False
        self._escaped = False
        self.growth = 0  # the most a completion grew between two checks (widens the window)
        self._since_plan = 0
        self._undo = (False, False, "")
        self._written = ""  # the text written since `plan` was made or checked
        self._opened = False  # the last token may have started something (see `scan_text`)

    @property
    def forced_token(self) -> int | None:
        """The token this step must write, or None (sample freely)."""
        return self.plan[0] if self.forcing and self.plan else None

    def start(self, matcher: Matcher) -> None:
        """Plan from the grammar's start; a grammar whose completion is not found (longer than
        `shortest_completion`'s max_chars) is left alone."""
        self.plan = self._plan(matcher)
        self.estimate = len(self.plan) if self.plan is not None else 0
        self.gave_up = self.plan is None

    def accept(self, matcher: Matcher, token: int, left: int) -> tuple[int, bool]:
        """Advance `matcher` with the sampled `token`, `left` tokens remaining after it; the
        token actually written (the plan's when the sampled one leaves no room) and whether the
        matcher accepted it. Call `finished` after."""
        if self.gave_up:
            return token, matcher.accept_token(token)
        if self.forcing and self.plan:
            token = self.plan.pop(0)
            ok = self._advance(matcher, token)
            self._written = ""  # the rest of the plan completes the grammar from here
            return token, ok
        checked_before = self.plan is not None and not self._written
        if not self._advance(matcher, token):
            return token, False
        if matcher.is_terminated():  # the stop token: nothing left to plan
            self.plan, self._written = [], ""
            return token, True
        self._since_plan += 1
        near = left <= self.estimate + max(self.window, 2 * self.growth)
        # the periodic check (it catches slow growth: characters that commit a string to a
        # longer enum value or key) comes more rarely the farther max_tokens is
        every = max(self.every, (left - self.estimate) // 8)
        if not (near or self._opened or self._since_plan >= every):
            return token, True  # far from max_tokens and nothing opened: no check this step
        before = self.plan if checked_before else None
        after = self._follow(matcher)
        if after is None or len(after) >= left:  # decisions are taken on a fresh plan
            fresh = self._plan(matcher)
            if after is None or (fresh is not None and len(fresh) < len(after)):
                after = fresh
        if after is not None and len(after) <= left:
            self._learn(after)
            self.forcing = 0 < len(after) >= left
            return token, True
        # no completion fits after this token: write a plan made before it instead
        matcher.rollback(1)
        undo = self._undo
        self._in_string, self._escaped, self._written = undo
        if before is None:
            before = self._follow(matcher) or self._plan(matcher)
        if before is None or len(before) > left + 1:  # too late to save: leave it as it was
            self._undo = undo
            self._advance(matcher, token)
            self.plan, self.gave_up = after, True
            logger.debug("complete_before_max_tokens: no completion fits %d tokens", left)
            return token, True
        self.replaced += 1
        self.plan, self.forcing = before[1:], True
        self.estimate = len(self.plan)
        token = before[0] if before else self.stop_id  # complete already: end it here
        ok = self._advance(matcher, token)
        self._written = ""
        return token, ok

    def take_forced(self, matcher: Matcher, limit: int) -> list[int]:
        """While forcing: the plan's ids but its last (at most `limit`), accepted by `matcher`,
        for the engine to write in one forward like jump-forward ids; the last one stays the
        next step's forced token, so the request still ends in `accept`."""
        if not self.forcing or not self.plan or len(self.plan) < 2 or limit <= 0:
            return []
        plan = self.plan
        ids = plan[: min(len(plan) - 1, limit)]
        state = (self._in_string, self._escaped, self._written)
        for n, token in enumerate(ids):
            if not self._advance(matcher, token):  # not expected: the plan was checked
                if n:
                    matcher.rollback(n)
                self._in_string, self._escaped, self._written = state
                self.plan = plan
                return []
        self.plan = plan[len(ids):]  # (_advance drops a plan past 256 written characters)
        self._written = ""
        return ids

    def note_forced(self, matcher: Matcher, ids: list[int], room: int) -> bool:
        """Ids `matcher` accepted outside `accept` (jump-forward), `room` tokens left after
        them: follow their text. Their text starts every completion (the grammar forces it),
        so it never makes one longer and needs no check far from max_tokens; but its ids may
        not be the plan's, so near max_tokens the plan is checked again, and False (this
        planner as it was; the caller rolls the ids back) when none fits any more."""
        undo = (self._in_string, self._escaped, self._written, self.plan, self.estimate)
        for token in ids:
            text = self.decode(token)
            self._in_string, self._escaped, _ = scan_text(text, self._in_string, self._escaped)
            self._written += text
        if self.gave_up or self.forcing or room > self.estimate + max(self.window,
                                                                      2 * self.growth):
            return True
        plan = self._follow(matcher)
        if plan is None or len(plan) > room:
            plan = self._plan(matcher)
        if plan is not None and len(plan) <= room:
            self._learn(plan)
            return True
        self._in_string, self._escaped, self._written, self.plan, self.estimate = undo
        return False

    def finished(self) -> bool:
        """The forced plan is written: the grammar is complete."""
        return self.forcing and not self.plan

    def _advance(self, matcher: Matcher, token: int) -> bool:
        self._undo = (self._in_string, self._escaped, self._written)
        if not matcher.accept_token(token):
            return False
        text = self.decode(token)
        self._in_string, self._escaped, self._opened = scan_text(text, self._in_string,
                                                                 self._escaped)
        self._written += text
        if len(self._written) > 256:  # too old to follow: the next check plans
            self.plan, self._written = None, ""
        return True

    def _learn(self, plan: list[int]) -> None:
        """Keep a checked plan; how much it grew since the last check widens the window."""
        self.growth = max(self.growth, len(plan) - self.estimate)
        self.plan, self.estimate, self._written = plan, len(plan), ""

    def _follow(self, matcher: Matcher) -> list[int] | None:
        """The last plan carried over the text written since it was made, if it still
        completes the grammar from here (checked with the matcher, a couple of microseconds
        instead of a search): the rest of its text when that text ends what was written (the
        model wrote the plan's first characters: a key's quote, a comma), else the plan itself
        (more characters of a free string or of a number leave the ending as it was)."""
        plan, written = self.plan, self._written
        if plan is None:
            return None
        if not written:
            return list(plan)
        if plan and self.decode(plan[0]) == written and "\ufffd" not in written:
            return plan[1:]  # the same characters (a split UTF-8 character may differ)
        text = "".join(self.decode(i) for i in plan)
        for k in range(min(len(written), len(text), 32), 0, -1):
            if text.startswith(written[-k:]):
                ids = self.encode(text[k:])
                if _accepts(matcher, ids):
                    return ids
                break
        return list(plan) if _accepts(matcher, plan) else None

    def _plan(self, matcher: Matcher) -> list[int] | None:
        self._since_plan = 0
        text = shortest_completion(matcher, self._in_string, self._escaped,
                                   closers=self.closers)
        if text is None:
            return None
        if not text:
            return []
        ids = self.encode(text)
        if _accepts(matcher, ids):
            return ids
        ids = [i for ch in text for i in self.encode(ch)]
        return ids if _accepts(matcher, ids) else None


def _accepts(matcher: Matcher, ids: list[int]) -> bool:
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
