"""No repeated keys in free-form JSON objects: a per-request key tracker and a bitmask guard.

xgrammar writes a schema's listed properties at most once each, but a free-form object
(`json_object`, `{"type": "object"}` with no properties, an untyped value) may repeat a key:
a grammar cannot say "distinct". `KeyTracker` follows the JSON text (O(new text) per token) and
knows the keys of each open object; before a step, `forbidden_prefixes()` lists the texts that
would close a key the current object already has (`"name"` after `, `, the rest of a partly
written key, ...); `VocabIndex.ids_starting_with` finds the tokens whose text starts with one
(a bisect in the sorted token texts) and the grammar layer clears their bits.

Keys are compared as written (an escaped spelling of a used key is not caught); the separators
are xgrammar's compact JSON ones (`", "` and `": "`, at most one whitespace character).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

_ANY_MAX = "\U0010ffff"
_MEMO_SIZE = 4096


class VocabIndex:
    """Token ids sorted by their text, for prefix lookups."""

    def __init__(self, decode: Callable[[int], str], vocab_size: int) -> None:
        self.by_id = [decode(i) for i in range(vocab_size)]
        pairs = sorted((t, i) for i, t in enumerate(self.by_id))
        self.texts = [t for t, _ in pairs]
        self.ids = [i for _, i in pairs]
        self._memo: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray] | None] = {}

    def text(self, token: int) -> str:
        return self.by_id[token] if 0 <= token < len(self.by_id) else ""

    def ids_starting_with(self, prefix: str) -> list[int]:
        lo = bisect.bisect_left(self.texts, prefix)
        hi = bisect.bisect_left(self.texts, prefix + _ANY_MAX, lo)
        return self.ids[lo:hi]

    def ids_for(self, prefixes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids starting with any of `prefixes`, as (bitmask word index, word with the ids'
        bits clear) arrays, or None when there are none; the same prefixes come back step after
        step (an object's keys change only when one is written), so answers are kept."""
        if prefixes in self._memo:
            return self._memo[prefixes]
        ids = np.array(sorted({i for p in prefixes for i in self.ids_starting_with(p)}),
                       dtype=np.int64)
        found = None
        if ids.size:
            found = (ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[prefixes] = found
        return found


class _Frame:
    __slots__ = ("is_object", "keys", "expect_key", "after_value", "memo")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.keys: set[str] = set()
        self.expect_key = is_object  # right after `{` or `,`
        self.after_value = False  # a value ended (or a scalar is being written)
        self.memo: dict[str, tuple[str, ...]] = {}  # forbidden prefixes per state, these keys


class KeyTracker:
    """The JSON structure written so far: open containers, their keys, the string state."""

    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.in_string = False
        self.escaped = False
        self.string_is_key = False
        self.key = ""  # the key being written
        self.pending_sep = ""  # `,` / `, ` written since the last value in an object

    def feed(self, text: str) -> None:
        for ch in text:
            self._char(ch)

    def _char(self, ch: str) -> None:
        top = self.stack[-1] if self.stack else None
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
                if self.string_is_key and top is not None:
                    top.keys.add(self.key)
                    top.memo.clear()
                    top.expect_key = False
                elif top is not None:
                    top.after_value = True
                return
            if self.string_is_key:
                self.key += ch
            return
        if ch == '"':
            self.in_string, self.escaped = True, False
            self.string_is_key = top is not None and top.is_object and top.expect_key
            self.key = ""
            self.pending_sep = ""
        elif ch in "{[":
            self.stack.append(_Frame(ch == "{"))
            self.pending_sep = ""
        elif ch in "}]":
            if self.stack:
                self.stack.pop()
            if self.stack:
                self.stack[-1].after_value = True
            self.pending_sep = ""
        elif ch == ",":
            if top is not None:
                top.expect_key, top.after_value = top.is_object, False
            self.pending_sep = ","
        elif ch == ":":
            if top is not None:
                top.after_value = False
        elif ch in " \n\r\t":
            if self.pending_sep == ",":
                self.pending_sep = ", "
        elif top is not None:  # a number, true, false, null
            top.after_value = True

    def forbidden_prefixes(self) -> tuple[str, ...]:
        """Texts that would complete a key the innermost open object already has."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top.is_object or not top.keys:
            return ()
        if self.in_string and self.string_is_key:
            if self.escaped:
                return ()
            return tuple(sorted(k[len(self.key):] + '"' for k in top.keys
                                if k.startswith(self.key)))
        if self.in_string:
            state, seps = "value", ('", "', '","')
        elif top.expect_key:
            state = "key" + self.pending_sep
            seps = {"": ('"', ' "'), ",": (' "', '"'), ", ": ('"',)}.get(self.pending_sep,
                                                                          ('"',))
        elif top.after_value:
            state, seps = "after", (', "', ',"')
        else:
            return ()
        found = top.memo.get(state)
        if found is None:
            found = top.memo[state] = tuple(sorted(sep + k + '"' for sep in seps
                                                   for k in top.keys))
        return found
