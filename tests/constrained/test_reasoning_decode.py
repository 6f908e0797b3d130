"""The reasoning gate on the demo model: think freely, then answer under the grammar."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.engine.structured.constrained import ConstrainedDecoding
from thinkgate.parsers import Parser, ReasoningFormat

# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
SCHEMA = {"type": "object", "additionalProperties": False, "properties": {
    "city": {"type": "string", "maxLength": 10},
    "temp": {"type": "integer", "minimum": -40, "maximum": 50}}, "required": ["city", "temp"]}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
ASK = [{"role": "user", "content": "What's the weather in Lisbon?"}]


def _sampled(seed: int, max_tokens: int = 120) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens)


def test_grammar_starts_after_think_and_reasoning_stays_free(llm: Any, tokenizer: Any) -> None:
    outs = llm.chat([ASK] * 6, [_sampled(i) for i in range(6)], use_tqdm=False,
                    response_format=RESPONSE_FORMAT, thinking_token_budget=40)
    end = tokenizer.convert_tokens_to_ids("</think>")
    for out in outs:
        ids = out.output.outputs[0].token_ids
        assert end in ids
        reasoning = out.message["reasoning"]
        assert reasoning and not reasoning.lstrip().startswith("{")  # not under the grammar
        jsonschema.validate(json.loads(out.message["content"]), SCHEMA)
        assert out.finish_reason == "stop"
        assert out.usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_enable_thinking_false_is_constrained_from_the_first_token(llm: Any) -> None:
    outs = llm.chat([ASK] * 4, [_sampled(i) for i in range(4)], use_tqdm=False,
                    response_format=RESPONSE_FORMAT,
                    chat_template_kwargs={"enable_thinking": False})
    for out in outs:
        assert out.output.outputs[0].text.startswith("{")
        assert out.message["reasoning"] is None
        jsonschema.validate(json.loads(out.message["content"]), SCHEMA)
        assert out.usage["completion_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("budget", [0, 4])
def test_budget_forces_the_end_marker_and_the_answer_still_validates(
        llm: Any, tokenizer: Any, budget: int) -> None:
    outs = llm.chat([ASK] * 4, [_sampled(i) for i in range(4)], use_tqdm=False,
                    response_format=RESPONSE_FORMAT, thinking_token_budget=budget)
    start, end = (tokenizer.convert_tokens_to_ids(m) for m in ("<think>", "</think>"))
    for out in outs:
        ids = out.output.outputs[0].token_ids
        # the template leaves <think> to the model; as in vLLM the budget counts after it
        assert start in ids[:ids.index(end)]
        opened = ids.index(start) + 1
        assert ids.index(end) <= opened + budget  # forced no later than the budget allows
        if budget == 0:
            assert ids[opened] == end  # the end marker right after the start marker
        jsonschema.validate(json.loads(out.message["content"]), SCHEMA)
        reasoning_tokens = out.usage["completion_tokens_details"]["reasoning_tokens"]
        assert reasoning_tokens <= budget


@pytest.fixture()
def three_token_marker(llm: Any, tokenizer: Any) -> Iterator[tuple[str, list[int]]]:
    """Swap in a reasoning format whose end marker is three tokens of the demo vocabulary."""
    marker = "</r>"  # "</", "r", ">" in the demo vocabulary
    ids = tokenizer.encode(marker, add_special_tokens=False)
    assert len(ids) == 3, ids
    fmt = ReasoningFormat(name="three", start=("<think>",), end=(marker,))
    engine = llm.llm_engine
    saved = engine.structured_output
    engine.structured_output = ConstrainedDecoding(
        tokenizer, engine.vocab_size, sorted(engine.eos_token_ids),
        max_num_seqs=engine.config.max_num_seqs, reasoning=fmt)
    try:
        yield marker, ids
    finally:
        engine.structured_output.close()
        engine.structured_output = saved


@pytest.mark.triton_path
def test_a_three_token_end_marker(llm: Any, tokenizer: Any,
                                  three_token_marker: tuple[str, list[int]]) -> None:
    marker, marker_ids = three_token_marker
    prompt = "<|im_start|>user\nWhat's the weather in Lisbon?<|im_end|>\n<|im_start|>assistant\n"
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=60, thinking_token_budget=5,
                             structured_outputs=StructuredOutputsParams(regex="[0-9]{2} C"))
              for i in range(4)]
    outs = llm.generate([prompt] * 4, params, use_tqdm=False)
    parser = Parser(ReasoningFormat(name="three", start=("<think>",), end=(marker,)))
    for out in outs:
        ids = out.outputs[0].token_ids
        at = next(i for i in range(len(ids)) if ids[i:i + 3] == marker_ids)
        opened = ids.index(tokenizer.convert_tokens_to_ids("<think>")) + 1
        assert opened <= at  # the model writes <think>; the budget counts after it (vLLM)
        assert at <= opened + 5  # forced right after 5 free reasoning tokens (earlier if written)
        answer = tokenizer.decode(ids[at + 3:], skip_special_tokens=True)
        assert re.fullmatch("[0-9]{2} C", answer), answer
        parsed = parser.parse(tokenizer.decode(ids, skip_special_tokens=True))
        assert parsed.content == answer
