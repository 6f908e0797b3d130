"""engine/structured/grammar.py without a model: compile cache, errors, bitmask buffer, matchers."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch
import xgrammar as xgr
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.grammar import Grammar, RequestGrammar
from thinkgate.engine.structured.reasoning_slots import RowGate

# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
SCHEMA = {"type": "object", "additionalProperties": False, "properties": {
    "name": {"type": "string", "maxLength": 6},
    "n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "n"]}


@pytest.fixture(scope="module")
def demo_tokenizer() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


@pytest.fixture()
def grammar(demo_tokenizer: Any) -> Grammar:
    vocab = -(-len(demo_tokenizer) // 64) * 64
    g = Grammar(demo_tokenizer, vocab, [demo_tokenizer.eos_token_id], max_num_seqs=8,
                max_cache_entries=3)
    yield g
    g.close()


def _masked_sample(bitmask: torch.Tensor, vocab: int, gen: torch.Generator) -> list[int]:
    bits = ((bitmask.unsqueeze(-1) >> torch.arange(32)) & 1).bool().reshape(len(bitmask), -1)
    logits = torch.randn(len(bitmask), vocab, generator=gen) * 4
    logits[~bits[:, :vocab]] = float("-inf")
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1).tolist()


def test_cache_hits_for_equal_constraints_and_is_bounded(grammar: Grammar) -> None:
    grammar.new_request(SO(json=SCHEMA))
    grammar.new_request(SO(json=json.dumps(SCHEMA, indent=2)))  # same schema, other spelling
    assert (grammar.cache.num_misses, grammar.cache.num_hits) == (1, 1)
    for pattern in ("a+", "b+", "c+", "d+"):
        grammar.new_request(SO(regex=pattern))
    assert len(grammar.cache) == 3  # max_cache_entries
    grammar.new_request(SO(json=SCHEMA))  # evicted: compiled again
    assert grammar.cache.num_misses == 6


@pytest.mark.parametrize("params, needle", [
    (SO(json='{"type": "object",'), "structured_outputs.json"),
    (SO(json={"type": "objectx"}), "objectx"),
    (SO(json={"type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}}),
     "minimum"),
    (SO(regex="a(b"), "'a(b'"),
    (SO(grammar="root ::= missing_rule"), "missing_rule"),
    (SO(structural_tag={"type": "structural_tag", "format": {"type": "nope"}}), "nope"),
])
def test_bad_constraints_raise_value_error_naming_them(grammar: Grammar, params: SO,
                                                       needle: str) -> None:
    with pytest.raises(ValueError, match="structured_outputs") as info:
        grammar.new_request(params)
    assert needle in str(info.value)


def test_random_walks_under_the_mask_always_give_valid_outputs(grammar: Grammar,
                                                                demo_tokenizer: Any) -> None:
    eos = demo_tokenizer.eos_token_id
    rows: list[RequestGrammar | None] = [grammar.new_request(SO(json=SCHEMA)) for _ in range(4)]
    rows += [grammar.new_request(SO(regex=r"[0-9]{3}-[a-z]{2}")),
             grammar.new_request(SO(choice=["yes", 'say "no"'])),
             grammar.new_request(SO(grammar='root ::= "(" [a-c]* ")"')), None]
    outs: list[list[int]] = [[] for _ in rows]
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        bitmask = grammar.fill_bitmask(rows)
        ids = _masked_sample(bitmask, grammar.vocab_size, gen)
        assert grammar.accept(rows, ids) == []
        for out, row, token in zip(outs, rows, ids):
            if row is not None and not (out and out[-1] == eos):
                out.append(token)
        if all(r is None or r.is_terminated for r in rows):
            break
    texts = [demo_tokenizer.decode([t for t in o if t != eos]) for o in outs[:-1]]
    for text in texts[:4]:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert texts[4][3] == "-" and texts[4][:3].isdigit() and len(texts[4]) == 6
    assert texts[5] in ("yes", 'say "no"')
    assert texts[6].startswith("(") and texts[6].endswith(")")


def test_bitmask_lives_in_one_preallocated_buffer(grammar: Grammar) -> None:
    rows = [grammar.new_request(SO(json=SCHEMA)), None]
    first = grammar.fill_bitmask(rows)
    second = grammar.fill_bitmask(rows)
    assert first.data_ptr() == second.data_ptr()  # no per-step allocation
    assert first.shape == (2, (grammar.vocab_size + 31) // 32)
    assert bool((first[1] == -1).all())  # unconstrained row: all allowed
    assert 0 < int(first[0].ne(0).sum()) < first.shape[1]  # the grammar row is sparse
    assert grammar.fill_bitmask([None, None]) is None  # nothing to mask


def test_a_rejected_token_fails_only_its_row(grammar: Grammar, demo_tokenizer: Any) -> None:
    rows = [grammar.new_request(SO(regex="[0-9]+")), grammar.new_request(SO(regex="[a-z]+"))]
    letter = demo_tokenizer.encode("q", add_special_tokens=False)[0]
    assert grammar.accept(rows, [letter, letter]) == [0]
    assert rows[0].error is not None and "rejected" in rows[0].error
    assert rows[1].error is None and grammar.accept([rows[1]], [letter]) == []
    assert not rows[0].constrained  # a failed row no longer takes part in the mask


def test_json_grammars_forbid_unbounded_whitespace(grammar: Grammar) -> None:
    for params in (SO(json=SCHEMA), SO(json_object=True)):
        matcher = grammar.new_request(params).matcher
        assert not matcher.accept_string("{  ")
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "content": {
        "type": "json_schema", "json_schema": SCHEMA}, "end": "</a>"}}
    matcher = grammar.new_request(SO(structural_tag=tag)).matcher
    assert matcher.accept_string('<a>{"name": "x",')
    assert not matcher.accept_string("   ")


def test_gate_keeps_thinking_tokens_from_the_matcher(grammar: Grammar,
                                                     demo_tokenizer: Any) -> None:
    end = demo_tokenizer.convert_tokens_to_ids("</think>")
    gate = RowGate([end], prompt_answered=False, budget=None, enable_in_reasoning=False)
    row = grammar.new_request(SO(regex="[0-9]+"), gate)
    letter = demo_tokenizer.encode("q", add_special_tokens=False)[0]
    digit = demo_tokenizer.encode("7", add_special_tokens=False)[0]
    assert not row.constrained and row.waiting and row.accept(letter)  # free while thinking
    assert grammar.fill_bitmask([row]) is None  # the device gate would skip its row anyway
    gate.answering = True  # what the step reads back once the device state saw the marker
    assert row.constrained and not row.waiting
    assert row.accept(digit) and not row.accept(letter)


def test_xgrammar_stop_tokens_are_the_engine_ones(grammar: Grammar, demo_tokenizer: Any) -> None:
    info: xgr.TokenizerInfo = grammar.cache.tokenizer_info
    assert info.stop_token_ids == [demo_tokenizer.eos_token_id]
    assert info.vocab_size == grammar.vocab_size and grammar.vocab_size % 64 == 0


def test_bounded_json_strings_exclude_control_characters(grammar: Grammar) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 10}}}
    matcher = grammar.new_request(SO(json=schema)).matcher
    assert matcher.accept_string('{"s": "ab')
    assert not matcher.accept_string("\x12")  # xgrammar alone accepts it (invalid JSON)
    assert matcher.accept_string('c"}')


def test_the_worker_thread_fill_equals_the_inline_fill(demo_tokenizer: Any) -> None:
    """CPU fills inline by default; the overlapped path (the GPU default) fills the same masks."""
    vocab = -(-len(demo_tokenizer) // 64) * 64
    made = [Grammar(demo_tokenizer, vocab, [demo_tokenizer.eos_token_id], max_num_seqs=4,
                    overlap=overlap) for overlap in (None, True)]
    try:
        assert [g.overlap for g in made] == [False, True]
        rows = [[g.new_request(SO(json=SCHEMA)), None, g.new_request(SO(regex="[a-c]+"))]
                for g in made]
        for token in demo_tokenizer.encode('{"', add_special_tokens=False):
            masks = []
            for g, r in zip(made, rows):
                g.start_fill(r)
                masks.append(g.finish_fill().clone())
                r[0].accept(token)
            assert torch.equal(masks[0], masks[1])
    finally:
        for g in made:
            g.close()
