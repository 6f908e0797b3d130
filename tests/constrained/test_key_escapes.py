"""`\\u` escapes in JSON object keys (engine/structured/json_keys.py): a key is compared by what
it decodes to, an ASCII character has one spelling in a key, values keep every escape."""

from __future__ import annotations

from typing import Any

import pytest
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.grammar import Grammar
from thinkgate.engine.structured.json_keys import KeyTracker, VocabIndex

ONE = {"type": "object", "properties": {"a": {"type": "integer"}}}
TWO = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
# patternProperties: left to llguidance's own JSON (json_any_order.py converts the others)
OWN = {**ONE, "patternProperties": {"^x": {"type": "string"}}}
VALUE_ESCAPES = '"\\u0061\\"\\\\\\b\\f\\n\\r\\t\\u001f\\u00e7\\u00E7\\ud83d\\ude00\\u0022"'


@pytest.fixture(scope="module")
def tok() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


@pytest.fixture(scope="module", params=["auto", "xgrammar"])
def grammar(tok: Any, request: pytest.FixtureRequest) -> Grammar:
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend=request.param)
    yield g
    g.close()


@pytest.fixture(scope="module")
def open_grammar(tok: Any) -> Grammar:
    """The default backend, whose objects take extra keys (xgrammar's strict mode closes them,
    so the extra-key cases have nothing to test there)."""
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend="auto")
    yield g
    g.close()


def _char_ids(tok: Any, text: str) -> list[int]:
    """`text` one character at a time (a token each here but for characters past ASCII)."""
    ids = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
    assert tok.decode(ids) == text
    return ids


def _goes(g: Grammar, params: SO, text: str, tok: Any) -> bool:
    """Whether `text` gets through, masks included, both as the tokenizer splits it and one
    character a token (an escape split at every place), and may end there."""
    results = []
    for ids in (tok.encode(text, add_special_tokens=False), _char_ids(tok, text)):
        row = g.new_request(params)
        ok = True
        for token in [*ids, 0]:
            mask = g.fill_bitmask([row])
            if mask is None or not (int(mask[0, token >> 5]) >> (token & 31)) & 1 or (
                    not row.accept(token)):
                ok = False
                break
        results.append(ok)
    assert results[0] == results[1], (text, results)
    return results[0]


@pytest.mark.parametrize("text", ['{"\\u0061": "x"}', '{"\\u0061": 1}', '{"a": 1, "\\u0061": 2}',
                                  '{"b": "x", "\\u0061": "y"}'])
@pytest.mark.parametrize("schema", [ONE, TWO, OWN])
def test_an_escaped_declared_key_is_no_extra_key(open_grammar: Grammar, tok: Any, schema: Any,
                                                 text: str) -> None:
    assert not _goes(open_grammar, SO(json=schema), text, tok)
    assert _goes(open_grammar, SO(json=schema), '{"a": 1, "c": "x"}', tok)


@pytest.mark.parametrize("text", [
    '{"a": 1, "\\u0061": 2}', '{"ab": 1, "a\\u0062": 2}', '{"\\u00e7": 1, "\\u00e7": 2}',
    '{"\\u00e7": 1, "\\u00E7": 2}', '{"\\u00e7x": 1, "\\u00E7x": 2}',
    '{"\\u00e7": 1, "\\u00e7": {"\\u00e7": 2}}', '{"\\ud83d\\ude00": 1, "\\ud83d\\ude00": 2}',
    '{"a\\nb": 1, "a\\u000ab": 2}', '{"a/b": 1, "a\\/b": 2}', '{"a\\"": 1, "a\\u0022": 2}'])
def test_an_escaped_repeat_of_a_used_key_is_refused(grammar: Grammar, tok: Any,
                                                    text: str) -> None:
    assert not _goes(grammar, SO(json_object=True), text, tok)
    assert not _goes(grammar, SO(json={"type": "object"}), text, tok)


@pytest.mark.parametrize("text", [
    '{"cura\\u00e7ao": 1, "x\\u00e7": 2, "\\u00e7": 3, "\\u00c7": 4}',
    '{"\\u00e7": {"\\u00e7": 1}, "\\u0142": [{"\\u00e7": 2}]}',
    '{"\\ud83d\\ude00": 1, "\\ud83d\\ude01": 2, "a\\u001fb": 3, "a\\nb": 4, "a\\"": 5}'])
def test_non_ascii_keys_may_be_escaped(grammar: Grammar, tok: Any, text: str) -> None:
    assert _goes(grammar, SO(json_object=True), text, tok)


def test_an_extra_key_may_escape_non_ascii(open_grammar: Grammar, tok: Any) -> None:
    assert _goes(open_grammar, SO(json=ONE), '{"a": 1, "cura\\u00e7ao": "\\u00e7"}', tok)


def test_values_keep_every_escape(grammar: Grammar, tok: Any) -> None:
    for params in (SO(json_object=True), SO(json={"type": "object"})):
        assert _goes(grammar, params, '{"a": ' + VALUE_ESCAPES + ', "b": ['
                     + VALUE_ESCAPES + ']}', tok)
    assert _goes(grammar, SO(json={"type": "array"}), "[" + VALUE_ESCAPES + "]", tok)


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1, "\\', ["/", "u002", "u003", "u004", "u005", "u006", "u007", "u0008", "u0009",
                      "u000a", "u000A", "u000c", "u000C", "u000d", "u000D"]),
    ('{"\\u00', ["2", "3", "4", "5", "6", "7", "08", "09", "0a", "0A", "0c", "0C", "0d",
                 "0D"]),
    ('{"\\u00e', []),                              # past ASCII: any escape
    ('{"\\u00e7": 1, "\\u00', ["2", "3", "4", "5", "6", "7", "08", "09", "0a", "0A", "0c",
                               "0C", "0d", "0D", "e7\"", "E7\""]),
    ('{"\\u00e7": 1, "', ['\u00e7"', '\\u00e7"', '\\u00E7"']),
    ('{"a": "\\u00', ['", "a"', '","a"']),           # a value: every escape
    ('{"a": "x\\', ['", "a"', '","a"']),
])
def test_forbidden_prefixes_of_escapes(text: str, expected: list[str]) -> None:
    tracker = KeyTracker()
    tracker.feed(text)
    assert sorted(tracker.forbidden_prefixes()) == sorted(expected)


def test_keys_are_tracked_decoded() -> None:
    tracker = KeyTracker()
    tracker.feed('{"\\u00e7\\ud83d\\ude00\\n\\"\\/a": 1, "x": {"\\u0142": 2')
    assert tracker.stack[0].keys == {"\u00e7\ud83d\ude00\n\"/a", "x"}
    assert tracker.stack[1].keys == {"\u0142"}


def test_spellings_are_cut_by_the_vocabulary() -> None:
    words = ["\\", "\\u", "\\u00", "e7", '"', "\u00e7", '\u00e7"', "x", "\\uE"]
    index = VocabIndex(lambda i: words[i], len(words))
    assert index.spellings("", "\u00e7", None) == ('\u00e7"',)  # no token starts "\u00e7
    assert index.spellings("", "\u00e7", "u00") == ()  # no token starts e7"
    assert index.spellings("", "", None) == ('"',)


NON_ASCII = {"type": "object", "properties": {"\u00e7": {"type": "integer"}},
             "patternProperties": {"^x": {"type": "string"}}}  # llguidance's own compile
NON_ASCII_TWO = {"type": "object", "properties": {"\u00e7": {"type": "integer"},
                                                  "b": {"type": "string"}}}  # any order


@pytest.mark.parametrize("text", ['{"\\u00e7": "x"}', '{"\\u00e7": 1}', '{"\\u00E7": 1}',
                                  '{"b": 1, "\\u00e7": "x"}', '{"\u00e7": 1, "\\u00e7": 2}'])
def test_a_declared_name_past_ascii_is_no_extra_key(open_grammar: Grammar, tok: Any,
                                                    text: str) -> None:
    # llguidance's own JSON (patternProperties: not converted) takes `"\u00e7"` as an extra
    # key: the key checks have such a name written as is there
    assert not _goes(open_grammar, SO(json=NON_ASCII), text, tok)
    for ok in ('{"\u00e7": 1}', '{"\u00e7": 2, "\\u00e7x": 1, "x\\u00e7": "y"}'):
        assert _goes(open_grammar, SO(json=NON_ASCII), ok, tok)


def test_any_order_objects_take_an_escaped_declared_name(open_grammar: Grammar, tok: Any) -> None:
    # json_any_order.py writes the declared key in both spellings and no extra key as either
    for spelled in ("\\u00e7", "\\u00E7", "\u00e7"):
        assert _goes(open_grammar, SO(json=NON_ASCII_TWO), f'{{"{spelled}": 1, "b": "x"}}', tok)
        assert not _goes(open_grammar, SO(json=NON_ASCII_TWO), f'{{"b": "x", "{spelled}": "y"}}',
                         tok)
        assert not _goes(open_grammar, SO(json=NON_ASCII_TWO), f'{{"\u00e7": 1, "{spelled}": 2}}',
                         tok)


def test_open_non_ascii_names() -> None:
    from thinkgate.engine.structured.json_schema_rules import open_non_ascii_names

    closed = {**NON_ASCII_TWO, "additionalProperties": False}
    assert open_non_ascii_names(NON_ASCII) == {"\u00e7"}
    assert open_non_ascii_names(NON_ASCII_TWO) == {"\u00e7"}
    assert open_non_ascii_names({"type": "array", "items": closed}) == frozenset()
    assert open_non_ascii_names({"anyOf": [closed, NON_ASCII]}) == {"\u00e7"}
