"""The digits of JSON numbers a matcher wrote, for llguidance (which bounds none).

xgrammar's number rules cap an integer part at 16 digits, a fraction at 16 and an exponent at 3
(json_schema_rules.py), so a model can never pad a number to max_tokens. llguidance has no such
option: `Digits` follows the JSON text a `GuidanceMatcher` accepted (inside a string or not,
which part of a number, how many digits so far) and the backend clears the tokens that would
write more digits than the part may take (`DigitMasks.limit`, one per backend: which tokens
start with how many digits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from thinkgate.engine.structured.json_schema_rules import (
    MAX_EXPONENT_DIGITS,
    MAX_FRACTION_DIGITS,
    MAX_INT_DIGITS,
)


class Digits:
    """The JSON text a matcher accepted, as far as number digits go: whether it is inside a
    string (and after a backslash), how many digits the current part of a number has (`run`:
    its integer part, fraction or exponent; None outside a number) and that part's limit.
    One state per accepted token, for rollback."""

    __slots__ = ("states",)

    def __init__(self, states: list[tuple[bool, bool, int | None, int]] | None = None) -> None:
        self.states = states or [(False, False, None, MAX_INT_DIGITS)]

    @property
    def run(self) -> int | None:
        return self.states[-1][2]

    @property
    def room(self) -> int:
        """Digits the current part may still take."""
        _, _, run, limit = self.states[-1]
        return limit - (run or 0)

    def feed(self, text: str) -> None:
        in_string, escaped, run, limit = self.states[-1]
        for ch in text:
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string, run = True, None
            elif ch == "." and run is not None:
                run, limit = 0, MAX_FRACTION_DIGITS
            elif ch in "eE" and run is not None:
                run, limit = 0, MAX_EXPONENT_DIGITS
            elif ch in "+-" and run == 0 and limit == MAX_EXPONENT_DIGITS:
                pass  # the exponent's sign
            elif "0" <= ch <= "9":
                run, limit = (1, MAX_INT_DIGITS) if run is None else (run + 1, limit)
            else:
                run = None
        self.states.append((in_string, escaped, run, limit))

    def undo(self, num_tokens: int) -> None:
        del self.states[-num_tokens:]

    def copy(self) -> Digits:
        return Digits(list(self.states))


def leading_digits(text: str) -> int:
    n = 0
    while n < len(text) and "0" <= text[n] <= "9":
        n += 1
    return n


class DigitMasks:
    """Token bitmasks by leading digits, for one vocabulary. token_text: a token's text; n: the
    tokens llguidance knows; vocab_size: the bitmask width (rows of 32-bit words)."""

    def __init__(self, token_text: Callable[[int], str], n: int, vocab_size: int) -> None:
        words = (vocab_size + 31) // 32
        self._leading = torch.tensor([leading_digits(token_text(t)) for t in range(n)]
                                     + [0] * (words * 32 - n), dtype=torch.int64)
        self._most_leading = int(self._leading.max())
        self._masks: dict[int, torch.Tensor] = {}
        self._one_digit = [t for t in range(n) if len(token_text(t)) == 1
                           and "0" <= token_text(t) <= "9"]

    def _mask(self, room: int) -> torch.Tensor:
        """The bitmask of the tokens that start with at most `room` digits."""
        mask = self._masks.get(room)
        if mask is None:
            allowed = (self._leading <= max(room, 0)).view(-1, 32).to(torch.int64)
            words = (allowed << torch.arange(32)).sum(dim=1)
            mask = torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)
            self._masks[room] = mask
        return mask

    def limit(self, row: torch.Tensor, room: int) -> bool:
        """Clear the bits of the tokens that start with more than `room` digits, unless no
        token would be left (the schema then needs the digits: `multipleOf`); False then."""
        if room >= self._most_leading:  # no token starts with more digits than that
            return True
        limited = row & self._mask(room)
        if bool(limited.any()):  # a bound the schema leaves no way out of (multipleOf) yields
            row.copy_(limited)
            return True
        return False

    def keep_finishing(self, matcher: Any, row: torch.Tensor) -> None:
        """A number at its digit limit that may only go on with digits (`multipleOf`: 97 is
        not a multiple of 7): keep the one-digit tokens after which it may end (one always
        exists for a divisor up to 10), so it cannot run on to max_tokens; the row stays as it
        is where none does. matcher: the request's `llguidance.LLMatcher`."""
        keep = []
        after = torch.zeros_like(row)
        for t in self._one_digit:
            if not int(row[t // 32]) >> (t % 32) & 1:
                continue
            fork = matcher.deep_copy()
            if not fork.consume_token(t):
                continue
            fork.unsafe_compute_mask_ptr(after.data_ptr(), after.numel() * 4)
            if fork.is_accepting() or bool((after & self._mask(0)).any()):
                keep.append(t)
        if keep:
            words = [0] * row.numel()
            for t in keep:
                words[t // 32] |= 1 << (t % 32)
            row.copy_(torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words],
                                   dtype=torch.int32))
