"""No repeated keys in free-form JSON objects: a per-request key tracker and a bitmask guard.

xgrammar writes a schema's listed properties at most once each, but a free-form object
(`json_object`, `{"type": "object"}` with no properties, an untyped value) may repeat a key:
a grammar cannot say "distinct". `KeyTracker` follows the JSON text (O(new text) per token) and
knows the keys of each open object; before a step, `forbidden_prefixes()` lists the texts that
would close a key the current object already has (`"name"` after `, `, the rest of a partly
written key, ...); `VocabIndex.ids_starting_with` finds the tokens whose text starts with one
(a bisect in the sorted token texts) and the grammar layer clears their bits.

Keys are compared by what they decode to, so a `\\u` spelling of a used key is the same key. In a
key each ASCII character has one spelling: a `\\u` escape of one that has another spelling (as is,
or `\\n`-style: 0x08-0x0d but 0x0b, 0x20-0x7f) and `\\/` are masked, so llguidance's extra keys
(which take any JSON string but the declared names as written) cannot spell a declared name;
characters past ASCII may be written as is or as `\\u` escapes (json.dumps' default), and the
texts that would close a used key are listed in each spelling some token starts with. Values
keep every escape. The separators are xgrammar's compact JSON ones (`", "` and `": "`, at most
one whitespace character).
"""

from __future__ import annotations

import bisect
import json
import re
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
        self._spelled: dict[tuple[str, str, str | None], tuple[str, ...]] = {}
        self._escaping: dict[tuple[bool, str | None], tuple[np.ndarray, np.ndarray] | None] = {}
        # the tokens an escape may start inside, and the masks of the usual states (~2 ms at
        # 151k: here, in the engine's warm-up, rather than on a step)
        self._backslash_ids = [i for i, t in enumerate(self.by_id) if "\\" in t]
        for in_key, esc in ((False, None), (True, None), (True, ""), (True, "u"), (True, "u0"),
                            (True, "u00"), (True, "u000")):
            self.refused_escape_ids(in_key, esc)

    def text(self, token: int) -> str:
        return self.by_id[token] if 0 <= token < len(self.by_id) else ""

    def ids_starting_with(self, prefix: str) -> list[int]:
        lo = bisect.bisect_left(self.texts, prefix)
        hi = bisect.bisect_left(self.texts, prefix + _ANY_MAX, lo)
        return self.ids[lo:hi]

    def has_prefix(self, prefix: str) -> bool:
        """Whether some token's text starts with `prefix`."""
        i = bisect.bisect_left(self.texts, prefix)
        return i < len(self.texts) and self.texts[i].startswith(prefix)

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

    def spellings(self, head: str, units: str, esc: str | None) -> tuple[str, ...]:
        """The texts a token could start with that write `head`, then `units` (the rest of a
        key, UTF-16 code units) in any spelling a key may take, then the closing quote; `esc`:
        an escape begun before (the text after its backslash), which the first unit continues.
        Spellings no token starts with are cut as soon as they diverge from every token."""
        found = self._spelled.get((head, units, esc))
        if found is None:
            found = tuple(sorted(_spell(head, units, esc, self.has_prefix)))
            if len(self._spelled) >= _MEMO_SIZE:
                self._spelled.clear()
            self._spelled[(head, units, esc)] = found
        return found

    def refused_escape_ids(self, in_key: bool,
                           esc: str | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The tokens holding a backslash that would write an escape a key may not take (see
        the module docstring), from inside a key (`esc`: an escape begun) or before one: as
        `ids_for`'s arrays, kept per state (a few hundred tokens scanned once per state)."""
        state = (in_key, esc)
        if state in self._escaping:
            return self._escaping[state]
        ids = np.array([i for i in self._backslash_ids
                        if _writes_refused_escape(self.by_id[i], in_key, esc)], dtype=np.int64)
        found = (ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32))) if ids.size else None
        if len(self._escaping) >= _MEMO_SIZE:
            self._escaping.clear()
        self._escaping[state] = found
        return found

# the short escapes a key's character is written with (json.dumps' own), and what they decode to
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
          "\t": "\\t"}
_DECODE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t"}
# escapes (the text after the backslash) a key may not take: ASCII characters with a spelling
# of their own. An escape begun that starts with one of these is refused.
_REFUSED = ("/", "u002", "u003", "u004", "u005", "u006", "u007", "u0008", "u0009", "u000a",
            "u000A", "u000c", "u000C", "u000d", "u000D")
_REFUSED_RE = re.compile("|".join(map(re.escape, _REFUSED)))
_PLAIN_RE = re.compile(r'[\x20-\x7f]*')  # printable ASCII: one spelling each, but `"` and `\`


def _escape_classes(unit: str) -> tuple[str, ...]:
    """`\\uXXXX` of a UTF-16 code unit, each hex letter in either case."""
    return ("\\", "u") + tuple(h + h.upper() if h.isalpha() else h for h in f"{ord(unit):04x}")


def _alternatives(units: str, i: int) -> list[tuple[tuple[str, ...], int]]:
    """The spellings a key may give code unit `units[i]`: (characters, each a string of the
    ones allowed there; how many units it writes)."""
    unit = units[i]
    code = ord(unit)
    if unit in _SHORT:
        return [(tuple(_SHORT[unit]), 1)]
    if code < 0x20:
        return [(_escape_classes(unit), 1)]
    if code < 0x80:
        return [((unit,), 1)]
    if 0xD800 <= code < 0xDC00 and i + 1 < len(units) and 0xDC00 <= ord(units[i + 1]) < 0xE000:
        astral = chr(0x10000 + ((code - 0xD800) << 10) + ord(units[i + 1]) - 0xDC00)
        return [((astral,), 2), (_escape_classes(unit), 1)]
    if 0xD800 <= code < 0xE000:  # a lone surrogate: only as an escape
        return [(_escape_classes(unit), 1)]
    return [((unit,), 1), (_escape_classes(unit), 1)]


def _spell(head: str, units: str, esc: str | None,
           has_prefix: Callable[[str], bool]) -> list[str]:
    """VocabIndex.spellings without its memo (a depth-first walk, cut by `has_prefix`)."""
    out: list[str] = []

    def walk(text: str, i: int, classes: tuple[str, ...]) -> None:
        if text and not has_prefix(text):
            return
        fixed = 0
        while fixed < len(classes) and len(classes[fixed]) == 1:
            fixed += 1
        if fixed:
            text += "".join(classes[:fixed])
            if not has_prefix(text):
                return
        if fixed < len(classes):
            for ch in classes[fixed]:
                walk(text + ch, i, classes[fixed + 1:])
            return
        rest = units[i:]
        if '"' not in rest and "\\" not in rest and _PLAIN_RE.fullmatch(rest):
            if has_prefix(text + rest + '"'):  # the common case: one spelling
                out.append(text + rest + '"')
            return
        for spelled, n in _alternatives(units, i):
            walk(text, i + n, spelled)

    if esc is None:
        walk(head, 0, ())
    elif units:  # the begun escape must spell the first unit
        for spelled, n in _alternatives(units, 0):
            begun = spelled[1:len(esc) + 1]
            if spelled[0] == "\\" and len(begun) == len(esc) and all(
                    ch in allowed for ch, allowed in zip(esc, begun)):
                walk(head, n, spelled[len(esc) + 1:])
    return out


def _writes_refused_escape(text: str, in_key: bool, esc: str | None) -> bool:
    """Whether `text`, written inside a key (`esc`: an escape begun) or before one (`, "`),
    writes an escape a key may not take before the key ends."""
    for ch in text:
        if not in_key:
            if ch == '"':
                in_key, esc = True, None
            elif ch not in ", \t\n\r":
                return False  # not a key next
        elif esc is None:
            if ch == "\\":
                esc = ""
            elif ch == '"':
                return False
        else:
            esc += ch
            if _REFUSED_RE.match(esc):
                return True
            if esc[0] != "u" or len(esc) == 5:
                esc = None
    return False


def _units(text: str) -> str:
    """`text` as UTF-16 code units (astral characters as surrogate pairs): a key written as is
    and one written with `\\u` escapes compare equal."""
    if all(ord(ch) < 0x10000 for ch in text):
        return text
    return "".join(ch if ord(ch) < 0x10000 else
                   chr(0xD800 + ((ord(ch) - 0x10000) >> 10)) + chr(0xDC00 + (ord(ch) & 0x3FF))
                   for ch in text)


def _as_is(units: str, as_is: bool = True) -> str:
    """The text of a key as is (json.dumps' escapes of `"`, `\\` and control characters only),
    from its UTF-16 code units; "" when it was not written as is."""
    if not as_is:
        return ""
    text = units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return json.dumps(text, ensure_ascii=False)[1:-1]


class _Frame:
    __slots__ = ("is_object", "keys", "expect_key", "after_value", "memo")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.keys: set[str] = set()  # decoded, as UTF-16 code units
        self.expect_key = is_object  # right after `{` or `,`
        self.after_value = False  # a value ended (or a scalar is being written)
        self.memo: dict[str, tuple[str, ...]] = {}  # forbidden prefixes per state, these keys

    def copy(self) -> _Frame:
        other = _Frame(self.is_object)
        other.keys, other.memo = set(self.keys), dict(self.memo)
        other.expect_key, other.after_value = self.expect_key, self.after_value
        return other


class KeyTracker:
    """The JSON structure written so far: open containers, their keys, the string state."""

    def __init__(self, raw_names: frozenset[str] = frozenset()) -> None:
        self.stack: list[_Frame] = []
        self.in_string = False
        self.esc: str | None = None  # inside a string: the escape begun (text after `\`)
        self.string_is_key = False
        self.key = ""  # the key being written, decoded (UTF-16 code units)
        self.key_as_is = True  # no character past ASCII of the key was written as an escape
        # names a key may take only as is (declared past ASCII: `open_non_ascii_names`), as
        # UTF-16 code units -> their text as is
        self.raw_names = {_units(n): _as_is(n) for n in raw_names}
        self.pending_sep = ""  # `,` / `, ` written since the last value in an object

    def copy(self) -> KeyTracker:
        """A copy to feed ahead (a speculative draft) leaving this one as it is: its frames
        copied, the name table shared (never changed after construction); a deep copy costs
        ~10x more."""
        other = KeyTracker.__new__(KeyTracker)
        other.__dict__.update(self.__dict__)
        other.stack = [frame.copy() for frame in self.stack]
        return other

    def feed(self, text: str) -> None:
        for ch in text:
            self._char(ch)

    def _char(self, ch: str) -> None:
        top = self.stack[-1] if self.stack else None
        if self.in_string:
            if self.esc is not None:
                self._escape(ch)
            elif ch == "\\":
                self.esc = ""
            elif ch == '"':
                self.in_string = False
                if self.string_is_key and top is not None:
                    top.keys.add(self.key)
                    top.memo.clear()
                    top.expect_key = False
                elif top is not None:
                    top.after_value = True
            elif self.string_is_key:
                self.key += ch if ord(ch) < 0x10000 else _units(ch)
            return
        if ch == '"':
            self.in_string, self.esc = True, None
            self.string_is_key = top is not None and top.is_object and top.expect_key
            self.key, self.key_as_is = "", True
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

    def _escape(self, ch: str) -> None:
        """One more character of an escape inside a string (a key's is decoded)."""
        assert self.esc is not None
        esc = self.esc + ch
        if esc[0] == "u" and len(esc) < 5:
            self.esc = esc
            return
        self.esc = None
        if self.string_is_key:
            if esc[0] == "u":
                try:
                    self.key += chr(int(esc[1:], 16))
                except ValueError:  # not hex: the grammar refuses it first
                    self.key += esc
                self.key_as_is &= ord(self.key[-1]) < 0x80
            else:
                self.key += _DECODE.get(ch, ch)

    def forbidden_prefixes(self, index: VocabIndex | None = None) -> tuple[str, ...]:
        """Texts that would complete a key the innermost open object already has, or write a
        `\\u` escape a key may not take (module docstring); `index` cuts the spellings of
        characters past ASCII to those some token starts with (without it: all of them)."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top.is_object:
            return ()
        has_prefix = index.has_prefix if index is not None else (lambda text: True)

        def spell(head: str, units: str, esc: str | None) -> tuple[str, ...]:
            if index is not None:
                return index.spellings(head, units, esc)
            return tuple(_spell(head, units, esc, has_prefix))

        if self.in_string and self.string_is_key:
            esc = self.esc
            refused = () if esc is None else tuple(r[len(esc):] for r in _REFUSED
                                                    if r.startswith(esc))
            begun = "" if esc is None else "\\" + esc
            for name, as_is in self.raw_names.items():
                if name.startswith(self.key) and name not in top.keys:
                    rest = as_is[len(_as_is(self.key, self.key_as_is)):] + '"'
                    keep = (rest[len(begun):] if self.key_as_is and rest.startswith(begun)
                            else None)
                    refused += tuple(text for text in spell("", name[len(self.key):], esc)
                                     if text != keep)
            return refused + tuple(text for k in sorted(top.keys) if k.startswith(self.key)
                                   for text in spell("", k[len(self.key):], esc))
        if not top.keys and not self.raw_names:
            return ()
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
            found = top.memo[state] = tuple(sorted(
                {text for sep in seps for k in top.keys for text in spell(sep, k, None)}
                | {text for sep in seps for name, as_is in self.raw_names.items()
                   for text in spell(sep, name, None) if text != sep + as_is + '"'}))
        return found

    def refused_escapes(self, index: VocabIndex) -> tuple[np.ndarray, np.ndarray] | None:
        """The tokens with a backslash inside that would write an escape a key may not take
        (`forbidden_prefixes` covers the ones that continue an escape begun), as
        `VocabIndex.ids_for`'s arrays, or None."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top.is_object:
            return None
        if self.in_string:
            return index.refused_escape_ids(True, self.esc) if self.string_is_key else None
        if top.expect_key or top.after_value:
            return index.refused_escape_ids(False, None)
        return None
