"""Jump-forward decoding on the demo model: forced grammar text written in one forward.

What must hold with it on: outputs stay valid; the text is exactly the detokenized ids; the ids
are fewer steps than tokens; logprobs of forced ids are the model's own (checked against
transformers running the same ids); stop strings, max_tokens, thinking and preemption behave as
without it; greedy outputs parse to the same JSON as with it off on these schemas.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch
from thinkgate import LLM, SamplingParams, StructuredOutputsParams
from thinkgate.api.chat import chat_layer_for
from thinkgate.engine.demo import demo_model_path

PROMPT = ("<|im_start|>user\nDescribe it as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")
THINKING_PROMPT = "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"

# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
LONG_KEYS = {"type": "object", "additionalProperties": False, "properties": {
    "location_name_of_the_city": {"type": "string", "maxLength": 10},
    "temperature_unit_preference": {"enum": ["celsius", "fahrenheit"]},
    "include_the_forecast_for_tomorrow": {"type": "boolean"}},
    "required": ["location_name_of_the_city", "temperature_unit_preference",
                 "include_the_forecast_for_tomorrow"]}
ENUMS = {"type": "object", "additionalProperties": False, "properties": {
    "weather_condition": {"enum": ["sunny_and_clear", "cloudy_with_rain", "snowing_heavily"]},
    "wind": {"enum": ["calm", "breezy", "stormy"]},
    "alert_level": {"type": "integer", "minimum": 0, "maximum": 5}},
    "required": ["weather_condition", "wind", "alert_level"]}
SCHEMAS = [LONG_KEYS, ENUMS]
# the demo model's own tool-call shape: it writes these keys with the tokenizer's usual ids,
# so greedy outputs match token for token (on keys it never saw it spells them oddly, e.g.
# "lo" "cation", and forced ids, which are the tokenizer's, change what it writes next)
CALL = {"type": "object", "additionalProperties": False, "properties": {
    "name": {"enum": ["get_weather", "get_time", "get_stock_price", "set_alarm"]},
    "arguments": {"type": "object", "additionalProperties": False, "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}, "required": ["name", "arguments"]}
QUESTIONS = ["What's the weather in Paris? Use celsius.", "What time is it in Tokyo?",
             "Is it raining in London?", "How warm is it in Rome today?"]


def _make(jump_forward: bool, **kwargs: Any) -> Any:
    """An engine on one backend (llguidance unless `structured_outputs_backend` is given):
    under `auto` a schema's first requests take llguidance and later ones xgrammar once its
    background compile is done, and the two allow different splits of forced text (after
    `"celsius` llguidance allows only `"}}`, xgrammar `"`, `"}` and `"}}` too), so which one
    served a greedy run would depend on timing."""
    kwargs.setdefault("structured_outputs_backend", "guidance")
    llm = LLM(reasoning_parser="qwen3", tool_call_parser="hermes", max_num_seqs=16,
              jump_forward=jump_forward, **kwargs)
    chat_layer_for(llm)  # the constrained-decoding hook
    return llm


@pytest.fixture(scope="module")
def llm_on() -> Any:
    return _make(True)


@pytest.fixture(scope="module")
def llm_off() -> Any:
    return _make(False)


def _params(schema: dict[str, Any], **kwargs: Any) -> SamplingParams:
    kwargs.setdefault("max_tokens", 120)
    return SamplingParams(structured_outputs=StructuredOutputsParams(json=schema), **kwargs)


def _run(llm: Any, prompts: list[str], params: SamplingParams) -> tuple[list[Any], int]:
    engine = llm.llm_engine
    before = engine.num_steps
    outs = llm.generate(prompts, params, use_tqdm=False)
    return outs, engine.num_steps - before


def test_greedy_outputs_are_the_same_with_and_without_it_in_fewer_steps(
        llm_on: Any, llm_off: Any) -> None:
    prompts = [PROMPT.replace("Describe it as JSON.", q) for q in QUESTIONS]
    params = _params(CALL, temperature=0)
    on, on_steps = _run(llm_on, prompts, params)
    off, off_steps = _run(llm_off, prompts, params)
    for a, b in zip(on, off):
        a, b = a.outputs[0], b.outputs[0]
        assert a.finish_reason == b.finish_reason == "stop"
        assert json.loads(a.text) == json.loads(b.text)
        assert a.token_ids == b.token_ids
        jsonschema.validate(json.loads(a.text), CALL)
    assert on_steps < off_steps * 0.7, (on_steps, off_steps)


def test_on_xgrammar_the_json_is_the_same_in_fewer_steps() -> None:
    """xgrammar allows any split of forced text, so plain greedy decoding may write `cel` `s`
    `ius` where jump-forward writes the tokenizer's `cel` `sius`: the ids may part, the JSON
    may not."""
    prompts = [PROMPT.replace("Describe it as JSON.", q) for q in QUESTIONS]
    params = _params(CALL, temperature=0)
    on, on_steps = _run(_make(True, structured_outputs_backend="xgrammar"), prompts, params)
    off, off_steps = _run(_make(False, structured_outputs_backend="xgrammar"), prompts, params)
    for a, b in zip(on, off):
        a, b = a.outputs[0], b.outputs[0]
        assert a.finish_reason == b.finish_reason == "stop"
        assert json.loads(a.text) == json.loads(b.text)
        jsonschema.validate(json.loads(a.text), CALL)
    assert on_steps < off_steps * 0.7, (on_steps, off_steps)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["long_keys", "enums"])
def test_forced_keys_take_few_steps_and_the_text_is_the_ids_text(
        llm_on: Any, schema: dict[str, Any]) -> None:
    outs, steps = _run(llm_on, [PROMPT], _params(schema, temperature=0))
    sample = outs[0].outputs[0]
    assert sample.finish_reason == "stop"
    jsonschema.validate(json.loads(sample.text), schema)
    assert steps < len(sample.token_ids) / 2, (steps, len(sample.token_ids))
    # usage counts the ids actually appended, and they spell exactly the text returned
    tokenizer = llm_on.get_tokenizer()
    assert tokenizer.decode(sample.token_ids, skip_special_tokens=True) == sample.text


def test_sampled_outputs_always_validate(llm_on: Any) -> None:
    for schema in SCHEMAS:
        params = _params(schema, temperature=1.0, seed=7, n=4)
        outs, _ = _run(llm_on, [PROMPT] * 3, params)
        for out in outs:
            for sample in out.outputs:
                assert sample.finish_reason == "stop", sample.text
                jsonschema.validate(json.loads(sample.text), schema)


def test_forced_logprobs_are_the_models_own(llm_on: Any) -> None:
    from transformers import AutoModelForCausalLM

    params = _params(LONG_KEYS, temperature=0, logprobs=2)
    outs, _ = _run(llm_on, [PROMPT], params)
    out = outs[0]
    sample = out.outputs[0]
    assert len(sample.logprobs) == len(sample.token_ids)
    model = AutoModelForCausalLM.from_pretrained(demo_model_path(), dtype=torch.float32)
    ids = torch.tensor([out.prompt_token_ids + sample.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    expected = torch.log_softmax(logits, dim=-1)
    start = len(out.prompt_token_ids) - 1  # the logits at position p predict token p + 1
    for i, (token, entry) in enumerate(zip(sample.token_ids, sample.logprobs)):
        want = expected[start + i, token].item()
        assert entry[token].logprob == pytest.approx(want, abs=2e-3), (i, token)
        assert len(entry) >= 2  # the top-2 beside the chosen one
    total = sum(entry[t].logprob for t, entry in zip(sample.token_ids, sample.logprobs))
    assert sample.cumulative_logprob == pytest.approx(total, abs=1e-3)


def test_max_tokens_and_stop_strings_still_hold(llm_on: Any, llm_off: Any) -> None:
    for limit in (1, 3, 7, 12):
        outs, _ = _run(llm_on, [PROMPT], _params(LONG_KEYS, temperature=0, max_tokens=limit))
        sample = outs[0].outputs[0]
        assert len(sample.token_ids) == limit
        assert sample.finish_reason == "length"
    # a stop string inside the forced key text ends the output there, as without jump-forward
    params = _params(LONG_KEYS, temperature=0, stop=["name_of"], logprobs=1)
    on, _ = _run(llm_on, [PROMPT], params)
    off, _ = _run(llm_off, [PROMPT], params)
    assert on[0].outputs[0].text == off[0].outputs[0].text == '{"location_'
    assert on[0].outputs[0].finish_reason == "stop"
    assert on[0].outputs[0].stop_reason == "name_of"
    # the token sampled after the forced ids is dropped, and its logprob with it
    assert len(on[0].outputs[0].logprobs) == len(on[0].outputs[0].token_ids)


def test_turned_off_per_request(llm_on: Any, llm_off: Any) -> None:
    structured = StructuredOutputsParams(json=LONG_KEYS, jump_forward=False)
    params = SamplingParams(temperature=0, max_tokens=120, structured_outputs=structured)
    on, on_steps = _run(llm_on, [PROMPT], params)
    off, off_steps = _run(llm_off, [PROMPT], _params(LONG_KEYS, temperature=0))
    assert on[0].outputs[0].token_ids == off[0].outputs[0].token_ids
    assert on_steps == off_steps == len(off[0].outputs[0].token_ids)


def test_never_inside_thinking(llm_on: Any, llm_off: Any) -> None:
    """The thinking part is free text: identical with and without jump-forward."""
    params = _params(ENUMS, temperature=0, max_tokens=200)
    on, _ = _run(llm_on, [THINKING_PROMPT], params)
    off, _ = _run(llm_off, [THINKING_PROMPT], params)
    a, b = on[0].outputs[0].text, off[0].outputs[0].text
    assert "</think>" in a and "</think>" in b
    assert a.split("</think>")[0] == b.split("</think>")[0]
    jsonschema.validate(json.loads(a.split("</think>")[1]), ENUMS)


def test_preemption_and_paged_layout_give_the_same_outputs(llm_on: Any) -> None:
    """Few KV blocks force preemption (recompute) of rows that carry forced ids."""
    params = _params(LONG_KEYS, temperature=0)
    want, _ = _run(llm_on, [PROMPT] * 6, params)
    # 16 blocks: the rows cannot all fit whatever order their grammars compile in (with 24,
    # the demo model v2's shorter answers fit at times)
    tight = _make(True, kv_layout="paged", block_size=16, num_kv_blocks=16, max_model_len=256)
    got, _ = _run(tight, [PROMPT] * 6, params)
    assert tight.llm_engine.scheduler.num_preemptions > 0
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]
    assert tight.llm_engine.block_manager.num_free_blocks == 16  # every block came back


def test_the_switches_reach_the_engine() -> None:
    """`--no-jump-forward` turns it off engine-wide; `structured_outputs.jump_forward: false`
    per request; both on by default."""
    from thinkgate.api.cli import build_parser
    from thinkgate.api.launch import engine_kwargs
    from thinkgate.api.protocol import StructuredOutputs
    from thinkgate.api.sampling import structured_from_request

    parser = build_parser()
    assert engine_kwargs(parser.parse_args(["serve"]))["jump_forward"] is True
    assert engine_kwargs(parser.parse_args(["serve", "--no-jump-forward"]))["jump_forward"] is False
    body = {"json": {"type": "object"}, "jump_forward": False}
    assert structured_from_request(StructuredOutputs.model_validate(body)).jump_forward is False
    body = {"json": {"type": "object"}}
    assert structured_from_request(StructuredOutputs.model_validate(body)).jump_forward is True
