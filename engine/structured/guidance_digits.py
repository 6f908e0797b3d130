"""The digits of JSON numbers a matcher wrote, for llguidance (which bounds none).

xgrammar's number rules cap an integer part at 16 digits, a fraction at 16 and an exponent at 3
(json_schema_rules.py), so a model can never pad a number to max_tokens. llguidance has no such
option: `Digits` follows the JSON text a `GuidanceMatcher` accepted (inside a string or not,
which part of a number, how many digits so far) and the backend clears the tokens that would
write more digits than the part may take (`GuidanceBackend.limit_digits`).
"""

from __future__ import annotations

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
