"""The engine's reasoning gate is the kernels' device state: slots, read-back, preemption."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from thinkgate import LLM, SamplingParams, StructuredOutputsParams
from thinkgate.engine.structured.reasoning_slots import replay

# Objects are closed (additionalProperties: false, as OpenAI's strict mode sends them): by
# JSON Schema an object takes other keys too, and the demo model at temperature 1 writes
# extra keys until max_tokens.
SCHEMA = {"type": "object", "additionalProperties": False, "properties": {
    "city": {"type": "string", "maxLength": 8},
    "temp": {"type": "integer", "minimum": -40, "maximum": 50}}, "required": ["city", "temp"]}
ASK = [{"role": "user", "content": "What's the weather in Lisbon?"}]


def _prompt(tokenizer: Any, thinking: bool = True) -> str:
    return tokenizer.apply_chat_template(ASK, add_generation_prompt=True, tokenize=False,
                                         enable_thinking=thinking)


def _params(seed: int | None, budget: int | None, max_tokens: int = 48) -> SamplingParams:
    return SamplingParams(temperature=0.0 if seed is None else 1.0, seed=seed,
                          max_tokens=max_tokens, thinking_token_budget=budget,
                          structured_outputs=StructuredOutputsParams(json=SCHEMA))


def _slot_values(state: Any, slot: int) -> list[int]:
    return [int(state.thinking[slot]), int(state.progress[slot]),
            int(state.num_reasoning_tokens[slot]), int(state.start_id[slot])]


def test_after_each_step_every_slot_equals_the_replay_of_its_outputs(
        llm: Any, tokenizer: Any) -> None:
    engine = llm.llm_engine
    hook = engine.structured_output
    free = hook.slots.num_free
    cases = [(0, 6), (1, None), (2, 0), (None, 3)]
    for i, (seed, budget) in enumerate(cases):
        engine.add_request(f"gate{i}", _prompt(tokenizer, thinking=i != 1), _params(seed, budget))
    engine.add_request("plain", "hello", SamplingParams(temperature=0, max_tokens=8))
    seqs = [s for r in engine.requests.values() for s in r.seqs]
    outputs = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs[out.request_id] = out
        for seq in seqs:
            gate = seq.reasoning_state
            if seq.is_finished or gate is None:
                continue
            want = replay(gate, seq.output_token_ids)
            assert gate.answering == (not int(want.thinking[0]))
            if gate.slot is None:  # only a row that answered whenever its batch ran skips it
                assert gate.answering
                continue
            assert _slot_values(hook.slots.state, gate.slot) == _slot_values(want, 0)
    assert hook.slots.num_free == free  # every slot given back
    assert seqs[-1].reasoning_state is None  # no grammar, no budget: no gate, no slot
    for i in range(len(cases)):
        text = outputs[f"gate{i}"].outputs[0].text
        jsonschema.validate(json.loads(text.split("</think>")[-1]), SCHEMA)


def test_the_device_budget_forces_the_marker(llm: Any, tokenizer: Any) -> None:
    """Set a budget on the device slot only: the next sampled ids are the end marker."""
    engine = llm.llm_engine
    hook = engine.structured_output
    end = tokenizer.convert_tokens_to_ids("</think>")
    engine.add_request("dev", _prompt(tokenizer), _params(3, None, max_tokens=40))
    seq = engine.requests["dev"].seqs[0]
    engine.step()  # prefill: the first id, the slot taken
    engine.step()
    assert seq.reasoning_state.answering is False and end not in seq.output_token_ids
    hook.slots.state.budget[seq.reasoning_state.slot] = 0
    engine.step()
    assert seq.output_token_ids[-1] == end and seq.reasoning_state.answering
    while engine.has_unfinished_requests():
        engine.step()
    answer = tokenizer.decode(seq.output_token_ids[3:], skip_special_tokens=True)
    jsonschema.validate(json.loads(answer), SCHEMA)


def test_preemption_with_reasoning_rows_keeps_greedy_outputs(llm: Any, tokenizer: Any) -> None:
    prompts = [_prompt(tokenizer, thinking=i % 3 != 2) for i in range(6)]
    params = [_params(None, b, max_tokens=30) for b in (4, None, 2, 0, None, 6)]
    params[4] = SamplingParams(temperature=0, max_tokens=30)  # a row without a gate
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    small = LLM(num_kv_blocks=8, block_size=16, max_model_len=64, reasoning_parser="qwen3",
                kv_layout="paged")
    got = [o.outputs[0].token_ids for o in small.generate(prompts, params, use_tqdm=False)]
    engine = small.llm_engine
    assert engine.scheduler.num_preemptions > 0
    assert got == expected
    assert engine.structured_output.slots.num_free == engine.config.max_num_seqs


def test_the_gate_runs_only_while_a_row_of_the_batch_thinks(llm: Any, tokenizer: Any) -> None:
    engine = llm.llm_engine
    hook = engine.structured_output
    engine.add_request("answers", _prompt(tokenizer, thinking=False), _params(0, None))
    engine.add_request("thinks", _prompt(tokenizer), _params(1, None))
    answers, thinks = (engine.requests[r].seqs[0] for r in ("answers", "thinks"))
    try:
        alone = hook.finish_fill(hook.start_fill([answers]))
        assert alone.reasoning is None and alone.slots is None and alone.bitmask is not None
        both = hook.finish_fill(hook.start_fill([answers, thinks]))
        assert both.reasoning is not None and both.slots is not None
        assert both.grammar_rows.tolist() == [True, False]  # the thinking row waits
    finally:
        engine.abort_request("answers")
        engine.abort_request("thinks")
