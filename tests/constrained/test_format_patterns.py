"""String formats written as their RFC's pattern (engine/structured/format_patterns.py): the
regexes against hand-picked strings of each RFC, and both backends through the grammar layer
(xgrammar's own `uri-reference` refuses absolute URIs; llguidance has none)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.format_patterns import PATTERNS, formats_as_patterns
from thinkgate.engine.structured.grammar import Grammar

CASES = {
    "uri-reference": {
        True: ["https://example.com/media-overlay.json", "http://a.b/c?d=e#f", "../x/y.html", "",
               "#frag", "mailto:a@b.c", "urn:isbn:0451450523", "http://a/b%20c", "a:b:c/d",
               "//host", "http://user:pw@1.2.3.4:8080/p?q=1/2", "?only=query"],
        False: ["a b", " invalid_uri", "1a:b", "%zz", "http://a{b}", "http://a/b c",
                "http://a/\"", "é"]},
    "json-pointer": {True: ["", "/", "/a/b", "/a~1b", "/~0"], False: ["a/b", "/a~2", "/~"]},
    "relative-json-pointer": {True: ["0", "0/a", "1#", "12/a~0"],
                              False: ["01/a", "/a", "1##", "-1"]},
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_each_pattern_takes_its_rfcs_strings(fmt: str) -> None:
    pattern = re.compile(PATTERNS[fmt])
    for ok, values in CASES[fmt].items():
        for value in values:
            assert bool(pattern.search(value)) is ok, (fmt, value)


def test_the_rewrite_keeps_a_pattern_of_its_own_and_the_request_schema() -> None:
    schema = {"type": "object", "properties": {
        "u": {"type": "string", "format": "uri-reference"},
        "p": {"type": "string", "format": "json-pointer", "pattern": "^/a"}}}
    out = formats_as_patterns(schema)
    assert out["properties"]["u"] == {"type": "string", "pattern": PATTERNS["uri-reference"]}
    assert out["properties"]["p"] == schema["properties"]["p"]
    assert schema["properties"]["u"]["format"] == "uri-reference"  # a copy was changed


@pytest.fixture(scope="module")
def tok() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


@pytest.mark.parametrize("backend", ["xgrammar", "guidance"])
def test_both_backends_take_absolute_and_relative_uri_references(tok: Any, backend: str) -> None:
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend=backend)
    schema = {"type": "object", "properties": {"u": {"type": "string",
                                                     "format": "uri-reference"}}}
    try:
        for value, ok in (("https://example.com/x?y#z", True), ("../p/q", True),
                          (" bad", False), ("a b", False)):
            row = g.new_request(SO(json=schema))
            went = True
            for token in [*tok.encode(f'{{"u": "{value}"}}', add_special_tokens=False), 0]:
                mask = g.fill_bitmask([row])
                if mask is None or not (int(mask[0, token >> 5]) >> (token & 31)) & 1 or (
                        not row.accept(token)):
                    went = False
                    break
            assert went is ok, (backend, value)
    finally:
        g.close()
