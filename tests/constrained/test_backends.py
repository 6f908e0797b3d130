"""The two grammar backends behind one interface (engine/structured/backend.py, issue 31): both
give valid outputs under the mask, `auto` picks per constraint and falls back, and the
llguidance matcher behaves as the rest of the room expects (stop ids, rollback, jump-forward,
bounded fraction digits, JSON Schema semantics)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch
from mask_walk import walks
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.grammar import Grammar, RequestGrammar

OPEN = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "day": {"type": "string", "format": "date"},
    "n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "n"]}
CLOSED = {**OPEN, "additionalProperties": False}


@pytest.fixture(scope="module")
def demo_tokenizer() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


def _grammar(tok: Any, backend: str, **kw: Any) -> Grammar:
    vocab = -(-len(tok) // 64) * 64
    # the demo model's two stop ids: <|endoftext|> (0) and <|im_end|> (2)
    return Grammar(tok, vocab, [0, 2], max_num_seqs=8, backend=backend, **kw)


@pytest.fixture(scope="module", params=["auto", "xgrammar", "guidance"])
def grammar(request: Any, demo_tokenizer: Any) -> Grammar:
    g = _grammar(demo_tokenizer, request.param)
    yield g
    g.close()


@pytest.fixture(scope="module")
def guidance(demo_tokenizer: Any) -> Grammar:
    g = _grammar(demo_tokenizer, "guidance")
    yield g
    g.close()


def _feed(grammar: Grammar, row: RequestGrammar, text: str, tok: Any) -> bool:
    """Whether every token of `text` is allowed by the row's mask and accepted."""
    return walks(grammar, row, tok.encode(text, add_special_tokens=False))


def _may_end(grammar: Grammar, row: RequestGrammar, stop: int) -> bool:
    mask = grammar.fill_bitmask([row])
    return mask is not None and bool((int(mask[0, stop >> 5]) >> (stop & 31)) & 1)


def _masked_walk(grammar: Grammar, rows: list[RequestGrammar], steps: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    outs: list[list[int]] = [[] for _ in rows]
    for _ in range(steps):
        mask = grammar.fill_bitmask(rows)
        assert mask is not None
        bits = ((mask.unsqueeze(-1) >> torch.arange(32)) & 1).bool().reshape(len(rows), -1)
        logits = torch.randn(len(rows), grammar.vocab_size, generator=gen) * 4
        logits[~bits[:, :grammar.vocab_size]] = float("-inf")
        ids = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1).tolist()
        assert grammar.accept(rows, ids) == []
        for out, token in zip(outs, ids):
            if not (out and out[-1] in (0, 2)):
                out.append(token)
        if all(r.is_terminated for r in rows):
            break
    return outs


def test_random_walks_under_each_backend_validate(grammar: Grammar, demo_tokenizer: Any) -> None:
    rows = [grammar.new_request(SO(json=CLOSED)) for _ in range(6)]
    rows.append(grammar.new_request(SO(regex=r"[0-9]{3}-[a-z]{2}")))
    outs = _masked_walk(grammar, rows, 80)
    assert all(r.is_terminated for r in rows)
    texts = [demo_tokenizer.decode([t for t in o if t not in (0, 2)]) for o in outs]
    for text in texts[:6]:
        jsonschema.validate(json.loads(text), CLOSED)
    assert len(texts[6]) == 6 and texts[6][3] == "-" and texts[6][:3].isdigit()


def test_auto_picks_per_constraint_and_falls_back(demo_tokenizer: Any) -> None:
    g = _grammar(demo_tokenizer, "auto")
    assert g.new_request(SO(json=OPEN)).backend == "guidance"
    assert g.new_request(SO(regex="[a-z]+")).backend == "guidance"
    assert g.new_request(SO(grammar='root ::= "a" | "b"')).backend == "xgrammar"
    assert g.new_request(SO(choice=["x", "y"])).backend == "xgrammar"
    # llguidance refuses a oneOf whose branches overlap; xgrammar with best effort takes it
    overlap = {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}
    assert g.new_request(SO(json=overlap, best_effort=True)).backend == "xgrammar"
    assert dict(g.cache.compiled_by) == {"guidance": 2, "xgrammar": 3}
    g.close()


def test_a_schema_no_backend_enforces_is_refused_naming_the_keyword(grammar: Grammar) -> None:
    with pytest.raises(ValueError, match="uniqueItems at /properties/tags"):
        grammar.new_request(SO(json={"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}))


def test_json_schema_semantics_by_default(demo_tokenizer: Any) -> None:
    g = _grammar(demo_tokenizer, "auto")
    extra = '{"name": "ab", "n": 3, "note": "more"}'
    assert _feed(g, g.new_request(SO(json=OPEN)), extra, demo_tokenizer)
    assert not _feed(g, g.new_request(SO(json=CLOSED)), extra, demo_tokenizer)
    # unknown formats are annotations: any string; known ones are checked (no 31 February)
    assert _feed(g, g.new_request(SO(json={"type": "string", "format": "float"})), '"x y"',
                 demo_tokenizer)
    row = g.new_request(SO(json={"type": "string", "format": "date"}))
    assert not _feed(g, row, '"2022-02-31"', demo_tokenizer)
    row = g.new_request(SO(json={"type": "string", "format": "date"}))
    assert _feed(g, row, '"2022-02-28"', demo_tokenizer) and _may_end(g, row, 2)
    g.close()
    strict = _grammar(demo_tokenizer, "auto", disable_additional_properties=True)
    assert not _feed(strict, strict.new_request(SO(json=OPEN)), extra, demo_tokenizer)
    strict.close()


def test_guidance_matcher_stop_ids_rollback_and_termination(guidance: Grammar,
                                                            demo_tokenizer: Any) -> None:
    for stop in (0, 2):  # either of the model's stop ids ends the grammar
        row = guidance.new_request(SO(json=CLOSED))
        assert _feed(guidance, row, '{"name": "ab", "n": 7}', demo_tokenizer)
        assert _may_end(guidance, row, 0) and _may_end(guidance, row, 2)
        assert not row.is_terminated
        assert row.accept(stop) and row.is_terminated
    row = guidance.new_request(SO(json=CLOSED))
    first = demo_tokenizer.encode("{", add_special_tokens=False)[0]
    bad = demo_tokenizer.encode("x", add_special_tokens=False)[0]
    assert not row.matcher.accept_token(bad)  # rejected, and the matcher is still usable
    assert row.matcher.accept_token(first)
    row.matcher.rollback(1)
    assert row.matcher.accept_token(first)
    fork = row.matcher.fork()
    assert fork.accept_string('"name": "a"') and not row.matcher.is_completed()


def test_guidance_jump_forward_gives_the_forced_key(guidance: Grammar,
                                                    demo_tokenizer: Any) -> None:
    from thinkgate.engine.structured.jump_forward import JumpForward

    schema = {"type": "object", "properties": {"location_name": {"type": "string"}},
              "required": ["location_name"], "additionalProperties": False}
    row = guidance.new_request(SO(json=schema))
    ids = JumpForward(demo_tokenizer).forced_ids(row.matcher, 32)
    # the forced text, but a last token a longer one could extend (` "` may start ` "Lisbon`)
    assert demo_tokenizer.decode(ids).startswith('{"location_name":')


def test_guidance_bounds_fraction_digits(guidance: Grammar, demo_tokenizer: Any) -> None:
    row = guidance.new_request(SO(json={"type": "number"}))
    assert _feed(guidance, row, "1." + "5" * 16, demo_tokenizer)
    mask = guidance.fill_bitmask([row])
    for digit in "0123456789":  # a 17th fraction digit is never allowed
        token = demo_tokenizer.encode(digit, add_special_tokens=False)[0]
        assert not (int(mask[0, token >> 5]) >> (token & 31)) & 1
    assert _may_end(guidance, row, 2)
    unbounded = guidance.new_request(SO(json={"type": "number"}, bound_numbers=False))
    assert _feed(guidance, unbounded, "1." + "5" * 40, demo_tokenizer)


@pytest.mark.parametrize("one_of, disjoint", [
    ([{"type": "string"}, {"type": "object"}], True),  # types
    ([{"type": "integer"}, {"type": "number"}], False),  # 1 is both
    ([{"const": "a"}, {"enum": ["b", "c"]}], True),
    ([{"enum": [1, "x"]}, {"type": "string"}], False),
    ([{"type": "object", "properties": {"kind": {"const": "cat"}}, "required": ["kind"]},
      {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"]}], True),
    ([{"type": "object", "properties": {"kind": {"const": "cat"}}},  # kind not required
      {"type": "object", "properties": {"kind": {"const": "dog"}}}], False),
    ([{"type": "object", "properties": {"a": {}}, "required": ["a"],
       "additionalProperties": False},
      {"type": "object", "properties": {"b": {}}, "required": ["b"],
       "additionalProperties": False}], True),
    ([{"$ref": "#/$defs/s"}, {"type": "array"}], True),
    ([{"$ref": "#/$defs/s"}], True),  # one branch: exactly one is at least one
    # branches with no type of their own under a `type: object` node: a discriminator
    ([{"properties": {"v": {"enum": ["1"]}}, "required": ["v"]},
      {"properties": {"v": {"$ref": "#/$defs/two"}}, "required": ["v"]}], "object"),
    ([{"properties": {"v": {"enum": ["1"]}}, "required": ["v"]},  # the same without the type
      {"properties": {"v": {"$ref": "#/$defs/two"}}, "required": ["v"]}], False),
])
def test_disjoint_one_of_is_any_of(demo_tokenizer: Any, one_of: list[Any],
                                   disjoint: bool | str) -> None:
    from thinkgate.engine.structured.schema_rewrites import disjoint_one_of

    schema = {"$defs": {"s": {"type": "string"}, "two": {"const": "2"}}, "oneOf": one_of}
    if isinstance(disjoint, str):
        schema["type"], disjoint = disjoint, True
    rewritten = disjoint_one_of(schema)
    assert ("anyOf" in rewritten and "oneOf" not in rewritten) is disjoint
    assert schema["oneOf"] == one_of  # the request's schema is not changed


def test_a_disjoint_one_of_compiles_and_validates(guidance: Grammar, demo_tokenizer: Any) -> None:
    schema = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
         "required": ["kind", "lives"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind"], "additionalProperties": False}]}
    ok, bad = '{"kind": "dog", "good": true}', '{"kind": "cat", "good": true}'
    assert _feed(guidance, guidance.new_request(SO(json=schema)), ok, demo_tokenizer)
    assert not _feed(guidance, guidance.new_request(SO(json=schema)), bad, demo_tokenizer)
    jsonschema.validate(json.loads(ok), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(bad), schema)


def test_guidance_bounds_integer_and_exponent_digits_and_keeps_escapes(
        guidance: Grammar, demo_tokenizer: Any) -> None:
    number = SO(json={"type": "number"})
    assert _feed(guidance, guidance.new_request(number), "9" * 16, demo_tokenizer)
    assert not _feed(guidance, guidance.new_request(number), "9" * 17, demo_tokenizer)
    assert _feed(guidance, guidance.new_request(number), "1.256e-06", demo_tokenizer)
    assert not _feed(guidance, guidance.new_request(number), "1e1234", demo_tokenizer)
    text = SO(json={"type": "string"})  # digits inside strings are not numbers
    assert _feed(guidance, guidance.new_request(text), '"' + "7" * 40 + '"', demo_tokenizer)
    assert _feed(guidance, guidance.new_request(text), '"Fran\\u00e7ais"', demo_tokenizer)


def test_a_hot_closed_schema_moves_to_xgrammar_masks(demo_tokenizer: Any) -> None:
    """A schema asked for again, which xgrammar enforces exactly as llguidance (closed objects,
    which both write in the declared order; no format or pattern), is compiled by xgrammar in
    the background; later requests get its faster masks and still validate. An open schema
    (any order under llguidance, extra keys) stays with llguidance."""
    g = _grammar(demo_tokenizer, "auto")
    hot = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                            "n": {"type": "integer"}},
           "required": ["name", "n"], "additionalProperties": False}
    assert g.new_request(SO(json=hot)).backend == "guidance"
    assert g.new_request(SO(json=hot)).backend == "guidance"  # hit: the promotion starts
    assert g.cache.wait_idle(60)
    rows = [g.new_request(SO(json=hot)) for _ in range(3)]
    assert [r.backend for r in rows] == ["xgrammar"] * 3 and g.cache.num_promoted == 1
    outs = _masked_walk(g, rows, 60)
    for out in outs:
        jsonschema.validate(json.loads(demo_tokenizer.decode([t for t in out if t not in (0, 2)])),
                            hot)
    assert not _feed(g, g.new_request(SO(json=hot)), '{"n": 1, "name": "a"}', demo_tokenizer)
    open_schema = {k: v for k, v in hot.items() if k != "additionalProperties"}
    for _ in range(3):
        row = g.new_request(SO(json=open_schema))
    assert g.cache.wait_idle(60)
    assert row.backend == "guidance" and g.cache.num_promoted == 1
    assert _feed(g, row, '{"n": 1, "name": "a"}', demo_tokenizer)
    g.close()


def test_the_debug_log_names_each_requests_backend(demo_tokenizer: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    g = _grammar(demo_tokenizer, "auto")
    with caplog.at_level("DEBUG", logger="thinkgate.engine.structured"):
        g.new_request(SO(json=OPEN))
        g.new_request(SO(grammar='root ::= "x"'))
    text = caplog.text
    assert "a json constraint on guidance" in text and "a grammar constraint on xgrammar" in text
    assert "compiled by guidance" in text and "compiled by xgrammar" in text
    g.close()
