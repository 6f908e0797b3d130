"""The escaped-newline filter (MiniCPM-V): what vLLM 0.33's test expects, and any split of the
input gives the same output."""

from __future__ import annotations

import random

from thinkgate.parsers.text_filters import EscapedNewlines

# vLLM 0.33 tests/parser/engine/test_minicpmv_reasoning.py, TestNewlineRecovery
TEXT = ("first\\nsecond\\rthird\\r\\nfourth `code\\nvalue` ```python\\nvalue = '\\\\n'\\n``` "
        "$x\\ny$ $$x\\ny$$ \\(x\\ny\\) \\[x\\ny\\] escaped \\\\n")
EXPECTED = ("first\nsecond\nthird\nfourth `code\\nvalue` ```python\\nvalue = '\\\\n'\\n``` "
            "$x\\ny$ $$x\\ny$$ \\(x\\ny\\) \\[x\\ny\\] escaped \\\\n")


def run(pieces: list[str]) -> str:
    f = EscapedNewlines()
    return "".join(f.feed(p) for p in pieces) + f.feed("", final=True)


def test_recovers_newlines_outside_code_and_math() -> None:
    assert run([TEXT]) == EXPECTED


def test_every_split_gives_the_same_text() -> None:
    for cut in range(len(TEXT) + 1):
        assert run([TEXT[:cut], TEXT[cut:]]) == EXPECTED, cut
    assert run(list(TEXT)) == EXPECTED
    rng = random.Random(7)
    for _ in range(50):
        pieces, i = [], 0
        while i < len(TEXT):
            n = rng.randint(1, 6)
            pieces.append(TEXT[i:i + n])
            i += n
        assert run(pieces) == EXPECTED


def test_holds_back_only_a_possible_escape() -> None:
    f = EscapedNewlines()
    assert f.feed("ab\\") == "ab"
    assert f.feed("nc") == "\nc"
    assert f.feed("x\\r\\") == "x"
    assert f.feed("", final=True) == "\n\\"  # at the end, `\\r` is a newline too
