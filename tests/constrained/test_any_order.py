"""JSON objects in any property order under the llguidance backend (json_any_order.py)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest
import torch
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.grammar import Grammar, RequestGrammar
from thinkgate.engine.structured.json_any_order import (
    MAX_ANY_ORDER,
    any_order_grammar,
    any_order_lark,
)

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "pos": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"]}},
    "required": ["name", "age"], "additionalProperties": {"type": "string"}}
VALUES = {"name": "Ana", "age": 7, "tags": ["a"], "pos": {"y": 2, "x": 1.5}}


@pytest.fixture(scope="module")
def tok() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


@pytest.fixture(scope="module")
def guidance(tok: Any) -> Grammar:
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=8, backend="guidance")
    yield g
    g.close()


def _goes(g: Grammar, schema: Any, text: str, tok: Any, **kw: Any) -> bool:
    """Whether `text` is allowed token by token (masks included) and may end there."""
    row = g.new_request(SO(json=schema, **kw))
    for token in [*tok.encode(text, add_special_tokens=False), 0]:
        if not _allowed(g, row, token) or not row.accept(token):
            return False
    return True


def _allowed(g: Grammar, row: RequestGrammar, token: int) -> bool:
    mask = g.fill_bitmask([row])
    return mask is not None and bool((int(mask[0, token >> 5]) >> (token & 31)) & 1)


def test_every_order_of_every_subset_is_accepted_iff_the_required_keys_are_in_it(
        guidance: Grammar, tok: Any) -> None:
    for size in range(len(VALUES) + 1):
        for keys in itertools.permutations(VALUES, size):
            text = json.dumps({k: VALUES[k] for k in keys})
            assert _goes(guidance, SCHEMA, text, tok) == ({"name", "age"} <= set(keys)), text


def test_a_missing_required_key_never_closes_the_object(guidance: Grammar, tok: Any) -> None:
    # a key listed twice is one key (the meta-schema check refuses such a schema before the
    # backend sees it; the backend alone)
    backend = guidance.cache.guidance
    compiled, _ = backend.compile("json", json.dumps({**SCHEMA, "required": ["age", "age"]}),
                                  False)
    for text, ok in (('{"age": 7}', True), ('{"name": "b"}', False),
                     ('{"name": "b", "tags": []}', False)):
        matcher = backend.new_matcher(compiled)
        assert (matcher.accept_string(text) and matcher.is_completed()) == ok, text
    row = guidance.new_request(SO(json=SCHEMA))
    for token in tok.encode('{"age": 7, "tags": []', add_special_tokens=False):
        assert _allowed(guidance, row, token) and row.accept(token)
    close = tok.encode("}", add_special_tokens=False)
    assert len(close) == 1 and not _allowed(guidance, row, close[0])
    assert not row.accept(close[0])


def test_closed_objects_of_required_members_keep_the_declared_order(guidance: Grammar,
                                                                   tok: Any) -> None:
    """OpenAI's strict-mode shape (closed, every member required): its outputs come in the
    schema's key order, the next key stays forced, and a hot schema may still move to
    xgrammar. A closed object with optional members takes them in any order."""
    from thinkgate.engine.structured.json_object_lark import may_reorder

    strict = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    assert _goes(guidance, strict, '{"name": "b", "age": 7}', tok)
    assert not _goes(guidance, strict, '{"age": 7, "name": "b"}', tok)
    assert not may_reorder(strict) and may_reorder({**strict, "additionalProperties": True})
    # `required` listing them in another order: that order is taken too (and no third one)
    listed = {**strict, "properties": {**strict["properties"], "id": {"type": "integer"}},
              "required": ["age", "id", "name"]}
    assert may_reorder(listed)
    for text, ok in (('{"name": "b", "age": 7, "id": 1}', True),
                     ('{"age": 7, "id": 1, "name": "b"}', True),
                     ('{"age": 7, "name": "b", "id": 1}', False),
                     ('{"age": 7, "id": 1}', False)):
        assert _goes(guidance, listed, text, tok) == ok, text
    closed = {**strict, "required": ["name"]}
    assert may_reorder(closed)
    for text in ('{"name": "b", "age": 7}', '{"age": 7, "name": "b"}', '{"name": "b"}'):
        assert _goes(guidance, closed, text, tok), text
    for text in ('{"age": 7}', '{"age": 7, "name": "b", "x": 1}',
                 '{"age": 7, "name": "b", "age": 8}'):
        assert not _goes(guidance, closed, text, tok), text
    nested = {**SCHEMA, "properties": {**SCHEMA["properties"], "pos": {
        **SCHEMA["properties"]["pos"], "additionalProperties": False}}}
    assert _goes(guidance, nested, '{"pos": {"x": 1, "y": 2}, "age": 7, "name": "b"}', tok)
    assert not _goes(guidance, nested, '{"pos": {"y": 2, "x": 1}, "age": 7, "name": "b"}', tok)


@pytest.mark.parametrize("extra", [True, {"type": "string"}])
def test_a_key_is_never_written_twice(guidance: Grammar, tok: Any, extra: Any) -> None:
    schema = {**SCHEMA, "additionalProperties": extra}
    assert _goes(guidance, schema, '{"age": 7, "name": "b"}', tok)
    assert not _goes(guidance, schema, '{"age": 7, "name": "b", "age": 8}', tok)
    assert not _goes(guidance, schema, '{"name": "b", "age": 7, "name": "c"}', tok)


@pytest.mark.parametrize("key", ["\\u0061ge", "\\u0061\\u0067\\u0065", "a\\u0067e"])
def test_an_escaped_spelling_of_a_declared_key_is_no_extra_key(guidance: Grammar, tok: Any,
                                                               key: str) -> None:
    schema = {**SCHEMA, "additionalProperties": {"type": "string"}}
    assert _goes(guidance, schema, '{"name": "b", "age": 7, "other": "x"}', tok)
    # a string "age" (an integer) or a second "age": neither gets through
    assert not _goes(guidance, schema, f'{{"name": "b", "{key}": "x"}}', tok)
    assert not _goes(guidance, schema, f'{{"name": "b", "age": 7, "{key}": "x"}}', tok)


def test_a_non_ascii_key_in_either_spelling(guidance: Grammar, tok: Any) -> None:
    schema = {"type": "object", "properties": {"größe": {"type": "integer"},
                                               "b": {"type": "integer"}},
              "required": ["größe"], "additionalProperties": {"type": "string"}}
    assert _goes(guidance, schema, '{"b": 1, "größe": 2}', tok)
    assert _goes(guidance, schema, '{"b": 1, "gr\\u00f6\\u00dfe": 2}', tok)
    assert _goes(guidance, schema, '{"gr\\u00F6\\u00DFe": 2, "b": 1}', tok)  # either hex case
    assert _goes(guidance, schema, '{"gr\\u00f6\\u00dfe": 2, "gr\\u00f6\\u00df": "x"}', tok)
    assert not _goes(guidance, schema, '{"größe": 2, "gr\\u00F6\\u00dfe": "x"}', tok)


def test_open_objects_take_extra_members_after_the_required_ones(guidance: Grammar,
                                                                 tok: Any) -> None:
    schema = {k: v for k, v in SCHEMA.items() if k != "additionalProperties"}
    assert _goes(guidance, schema, '{"age": 7, "name": "b", "zz": [1], "q": null}', tok)
    relaxed = {**schema, "required": []}
    assert _goes(guidance, relaxed, '{"zz": [1], "age": 7, "q": null, "name": "b"}', tok)
    # extra members wait for the required ones (a completion search never loops on them)
    assert not _goes(guidance, schema, '{"age": 7, "zz": [1], "name": "b"}', tok)
    assert not _goes(guidance, schema, '{"zz": [1], "age": 7}', tok)


def test_a_required_key_the_properties_do_not_list(guidance: Grammar, tok: Any) -> None:
    schema = {**SCHEMA, "required": ["name", "id"], "additionalProperties": {"type": "integer"}}
    assert _goes(guidance, schema, '{"id": 3, "name": "b"}', tok)
    assert _goes(guidance, schema, '{"name": "b", "id": 3, "q": 4}', tok)
    assert not _goes(guidance, schema, '{"name": "b", "q": 4}', tok)
    assert not _goes(guidance, schema, '{"id": "3", "name": "b"}', tok)
    assert not _goes(guidance, schema, '{"id": 3, "name": "b", "id": 4}', tok)


def test_past_the_size_limit_an_object_takes_any_order_under_the_key_checks(
        guidance: Grammar, tok: Any) -> None:
    """Past MAX_ANY_ORDER members: optional members anywhere (the repeated-key checks take a
    second one out), the required ones in any order while there are few of them."""
    names = [f"p{i}" for i in range(MAX_ANY_ORDER + 3)]
    for extra in (False, {"type": "string"}):
        big = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
               "required": names[:2], "additionalProperties": extra}
        found = any_order_grammar(big, json.dumps, False)
        assert found is not None and found.key_checks
        for order in (names, names[::-1], names[3:] + names[:3], [names[5], names[1]] + names[2:5]
                      + [names[0]]):
            assert _goes(guidance, big, json.dumps({n: 1 for n in order}), tok), order
        assert not _goes(guidance, big, json.dumps({n: 1 for n in names[1:]}), tok)
        assert not _goes(guidance, big, '{"p3": 1, "p0": 1, "p3": 2, "p1": 1}', tok)
        assert not _goes(guidance, big, '{"p0": 1, "p1": 1, "p0": 2}', tok)
        assert not _goes(guidance, big, '{"p0": 1, "p1": "x"}', tok)
        assert _goes(guidance, big, '{"p0": 1, "p1": 1, "q": "x"}', tok) == (extra is not False)
    # the request's flexible whitespace: the key checks read compact separators only
    assert any_order_lark(big, json.dumps, True) is None
    assert not _goes(guidance, big, json.dumps({n: 1 for n in names[::-1]}), tok,
                     disable_any_whitespace=False)
    # a big object holding a small one: the small one still takes any order
    outer = {**big, "properties": {**big["properties"], "p0": SCHEMA}}
    inner = json.dumps({"age": 1, "name": "x"})
    assert _goes(guidance, outer, json.dumps({n: 1 for n in names}).replace(
        '"p0": 1', f'"p0": {inner}'), tok)


def test_many_required_members_come_in_the_declared_or_the_listed_order(
        guidance: Grammar, tok: Any) -> None:
    names = [f"p{i}" for i in range(MAX_ANY_ORDER + 3)]
    listed = names[1:][::-1] + [names[0]]  # `required` in another order than `properties`
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "required": listed[:-1], "additionalProperties": False}
    assert _goes(guidance, schema, json.dumps({n: 1 for n in names}), tok)
    assert _goes(guidance, schema, json.dumps({n: 1 for n in listed}), tok)
    assert _goes(guidance, schema, json.dumps({n: 1 for n in names[1:] + names[:1]}), tok)
    assert not _goes(guidance, schema, json.dumps({n: 1 for n in names[2:] + names[:2]}), tok)
    assert not _goes(guidance, schema, json.dumps({n: 1 for n in names[2:]}), tok)


def test_pattern_properties(guidance: Grammar, tok: Any) -> None:
    schema = {"type": "object", "properties": {"version": {"type": "string"},
                                               "name": {"type": "string"}},
              "patternProperties": {"^x-": {"type": "integer"}, r"^\d+$": {"type": "boolean"},
                                    "^req$": {"type": "null"}},
              "required": ["name", "req"], "additionalProperties": False}
    found = any_order_grammar(schema, json.dumps, False)
    assert found is not None and found.key_checks
    # pattern members, as extra ones, once the required members are in
    ok = ['{"req": null, "version": "1", "name": "n", "x-a": 1, "12": true}',
          '{"name": "n", "req": null}', '{"req": null, "name": "n", "x-": 2}']
    for text in ok:
        assert _goes(guidance, schema, text, tok), text
    bad = ['{"name": "n"}', '{"name": "n", "req": 1}', '{"x-a": 1, "name": "n", "req": null}',
           '{"name": "n", "req": null, "x-a": "1"}', '{"name": "n", "req": null, "y": 1}',
           '{"name": "n", "req": null, "1a": true}', '{"name": "n", "req": null, "x-a": 1, "x-a": 2}',
           '{"name": "n", "req": null, "x\\u002da": 1}', '{"name": "n", "req": null, "version": 1}']
    for text in bad:
        assert not _goes(guidance, schema, text, tok), text
    other = {**schema, "additionalProperties": {"type": "string"}}
    assert _goes(guidance, other, '{"name": "n", "req": null, "y": "s", "x-b": 3}', tok)
    assert not _goes(guidance, other, '{"name": "n", "req": null, "x-b": "s"}', tok)
    # a declared name a pattern matches (its value would need both schemas), a pattern outside
    # the subset written: left to llguidance's own JSON
    assert any_order_grammar({**schema, "properties": {"x-v": {}}}, json.dumps, False) is None
    assert any_order_grammar({**schema, "patternProperties": {"(?=a)": {}}}, json.dumps,
                             False) is None


def test_whitespace_options_are_llguidances(guidance: Grammar, tok: Any) -> None:
    assert "WS?" in any_order_lark(SCHEMA, json.dumps, True)
    assert "WS" not in any_order_lark(SCHEMA, json.dumps, False)
    text = json.dumps({"age": 7, "name": "b", "pos": {"y": 1, "x": 2}}, indent=2)
    assert _goes(guidance, SCHEMA, text, tok, disable_any_whitespace=False)
    assert not _goes(guidance, SCHEMA, text, tok)  # compact by default: ", " and ": " only
    assert not _goes(guidance, SCHEMA, '{"age":7, "name": "b"}', tok)
    loose = '{ "age" : 7 ,"name":"b"  }'
    assert _goes(guidance, SCHEMA, loose, tok, disable_any_whitespace=False)
    assert not _goes(guidance, SCHEMA, '{   "age": 7, "name": "b"}', tok,
                     disable_any_whitespace=False)  # at most two spaces, as llguidance


def test_refs_anyof_arrays_and_bounds(guidance: Grammar, tok: Any) -> None:
    schema = {"$defs": {"pt": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}, "next": {"$ref": "#/$defs/pt"}},
        "required": ["x", "y"]}},
        "type": "array", "minItems": 2, "maxItems": 3, "items": {"anyOf": [
            {"$ref": "#/$defs/pt"}, {"type": "null"}]}}
    assert any_order_lark(schema, json.dumps, False) is not None
    ok = [{"y": 1, "x": 2, "next": {"next": {"x": 0, "y": 0}, "y": 3, "x": 4}}, None]
    assert _goes(guidance, schema, json.dumps(ok), tok)
    assert not _goes(guidance, schema, json.dumps(ok[:1]), tok)
    assert not _goes(guidance, schema, json.dumps(ok + [None, None]), tok)
    assert not _goes(guidance, schema, json.dumps([{"y": 1, "next": {}, "x": 2}, None]), tok)


def test_required_key_sets_of_a_rewritten_one_of(guidance: Grammar, tok: Any) -> None:
    schema = {"type": "object", "properties": {
        "shape": {"type": "string"}, "radius": {"type": "number"},
        "length": {"type": "number"}, "width": {"type": "number"}},
        "required": ["shape"],
        "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]}
    assert _goes(guidance, schema, '{"radius": 2, "shape": "circle"}', tok)
    assert _goes(guidance, schema, '{"width": 2, "shape": "r", "length": 3}', tok)
    assert not _goes(guidance, schema, '{"width": 2, "shape": "r"}', tok)
    assert not _goes(guidance, schema, '{"width": 2, "radius": 1, "shape": "r", "length": 3}',
                     tok)


def test_required_key_sets_under_all_of(guidance: Grammar, tok: Any) -> None:
    # dependentRequired, rewritten for llguidance as allOf [anyOf [a absent, a and b present]]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                               "c": {"type": "integer"}},
              "dependentRequired": {"a": ["b"]}}
    assert _goes(guidance, schema, '{"b": 1, "a": 2}', tok)
    assert _goes(guidance, schema, '{"c": 1, "b": 1}', tok)
    assert not _goes(guidance, schema, '{"c": 1, "a": 2}', tok)


def test_nested_key_sets_of_one_of_and_not(guidance: Grammar, tok: Any) -> None:
    # a oneOf whose branch holds a `not required` (the rewrites nest anyOf / allOf / type in
    # its branches): the object still takes its members in any order, exactly as jsonschema
    schema = {"type": "object", "additionalProperties": False, "properties": {
        "image": {"type": "string"}, "args": {"type": "integer"}, "file": {"type": "string"},
        "dir": {"type": "string"}, "ports": {"type": "integer"}},
        "oneOf": [{"not": {"required": ["args", "file"]}, "required": ["image"]},
                  {"required": ["dir"]}]}
    for text in ('{"ports": 1, "image": "a"}', '{"file": "f", "ports": 1, "image": "a"}',
                 '{"ports": 2, "dir": "d", "args": 1}',
                 '{"args": 1, "file": "f", "image": "a"}', '{"image": "a", "dir": "d"}',
                 '{"ports": 1}'):
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        assert _goes(guidance, schema, text, tok) == valid, text


def test_one_of_branches_with_a_discriminator(guidance: Grammar, tok: Any) -> None:
    # branches that hold a key's value (a const) as well as required keys: merged into the
    # object's own properties, each branch in any order, as jsonschema has it
    schema = {"type": "object", "properties": {
        "is": {"type": "string", "enum": ["routingKey", "queue"]},
        "exchange": {"type": "integer"}, "queue": {"type": "integer"}, "v": {"type": "string"}},
        "oneOf": [{"properties": {"is": {"const": "queue"}}, "required": ["queue"]},
                  {"properties": {"is": {"const": "routingKey"}}, "required": ["exchange"]}]}
    for text in ('{"v": "1", "queue": 2, "is": "queue"}', '{"exchange": 1, "is": "routingKey"}',
                 '{"exchange": 1}', '{"queue": 2, "is": "routingKey"}',
                 '{"is": "queue"}', '{"exchange": 1, "v": "2", "queue": 2}'):
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        assert _goes(guidance, schema, text, tok) == valid, text
    # the oneOf rewrite's documented narrowing (schema_rewrites.py): a branch also lacks a key
    # the other requires, so this valid instance is refused (never an invalid one taken)
    assert not _goes(guidance, schema, '{"queue": 2, "exchange": 1, "is": "queue"}', tok)


def test_object_branches_merge_with_the_node(guidance: Grammar, tok: Any) -> None:
    # members beside a oneOf of $refs to objects (one closed): each branch merged with the
    # node's own members, any order, exactly as jsonschema has it
    schema = {"type": "object", "properties": {"type": {"type": "string"},
                                               "on": {"type": "boolean"}},
              "required": ["type"], "oneOf": [{"$ref": "#/$defs/node"}],
              "$defs": {"node": {"properties": {"type": {"const": "node"}, "id": {"type": "integer"},
                                                "on": {}},
                                 "required": ["id"], "additionalProperties": False}}}
    for text in ('{"id": 3, "type": "node"}', '{"on": true, "id": 3, "type": "node"}',
                 '{"id": 3, "type": "edge"}', '{"id": 3}', '{"type": "node", "id": 3, "x": 1}',
                 '{"on": 1, "id": 3, "type": "node"}'):
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
        assert _goes(guidance, schema, text, tok) == valid, text


def test_an_any_of_beside_a_type(guidance: Grammar, tok: Any) -> None:
    # {type: object, oneOf: [...]} whose branches say no type: disjoint through a required
    # discriminator (the parent's type makes them objects), then each branch in any order
    one = {"properties": {"v": {"enum": ["1"]}, "a": {"type": "integer"},
                          "b": {"type": "integer"}}, "required": ["v"],
           "additionalProperties": False}
    two = {"properties": {"v": {"enum": ["2"]}, "c": {"type": "integer"}, "d": {}},
           "required": ["v", "c"], "additionalProperties": False}
    schema = {"type": "object", "oneOf": [one, {"$ref": "#/$defs/two"}], "$defs": {"two": two}}
    for text, ok in (('{"b": 1, "a": 2, "v": "1"}', True), ('{"c": 1, "d": 0, "v": "2"}', True),
                     ('{"c": 1, "v": "1"}', False), ('{"a": 1, "v": "2", "c": 1}', False)):
        assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == ok
        assert _goes(guidance, schema, text, tok) == ok, text


def test_outer_objects_keep_any_order_past_the_rule_budget(tok: Any) -> None:
    # eight inner objects of 5 optional members spend the 256-rule budget (32 each) before
    # the outer one (4 required members among 12) is written; on a second pass the inner
    # objects take the tracked form under the key checks, and the outer one still takes its
    # required members in any order
    inner = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(5)}}
    schema = {"type": "object", "required": ["a", "b", "c", "d"], "properties": {
        **{k: {"type": "integer"} for k in "abcd"}, **{f"o{i}": inner for i in range(8)}}}
    found = any_order_grammar(schema, json.dumps, False)
    assert found is not None and found.key_checks
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend="guidance")
    try:
        text = '{"o7": {"p4": 1, "p0": 2}, "d": 1, "o0": {}, "c": 1, "b": 2, "a": 3}'
        assert _goes(g, schema, text, tok)
        assert not _goes(g, schema, '{"o7": {"p4": 1}, "d": 1, "c": 1, "b": 2}', tok)
        assert not _goes(g, schema, '{"o7": {"p4": 1, "p4": 2}, "d": 1, "c": 1, "b": 2, "a": 3}',
                         tok)
    finally:
        g.close()


def test_digits_stay_bounded_in_any_order(guidance: Grammar, tok: Any) -> None:
    assert _goes(guidance, SCHEMA, '{"age": 1234567890123456, "name": "b"}', tok)
    assert not _goes(guidance, SCHEMA, '{"age": 12345678901234567, "name": "b"}', tok)


def test_random_walks_validate(guidance: Grammar, tok: Any) -> None:
    schema = {**SCHEMA, "additionalProperties": {"type": "integer"}}
    rows = [guidance.new_request(SO(json=schema)) for _ in range(6)]
    gen = torch.Generator().manual_seed(0)
    outs: list[list[int]] = [[] for _ in rows]
    for _ in range(120):
        mask = guidance.fill_bitmask(rows)
        bits = ((mask.unsqueeze(-1) >> torch.arange(32)) & 1).bool().reshape(len(rows), -1)
        logits = torch.randn(len(rows), guidance.vocab_size, generator=gen) * 4
        logits[~bits[:, :guidance.vocab_size]] = float("-inf")
        ids = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1).tolist()
        assert guidance.accept(rows, ids) == []
        for out, token in zip(outs, ids):
            if not (out and out[-1] in (0, 2)):
                out.append(token)
        if all(r.is_terminated for r in rows):
            break
    for out in outs:
        if out[-1] in (0, 2):  # ended: a complete instance
            jsonschema.validate(json.loads(tok.decode(out[:-1])), schema)
