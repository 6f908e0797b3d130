"""A mixture-of-experts model behind the real server: forced tool calls in the hermes format
and json_schema answers through the openai client, at the API's default temperature (1).

The model is a tiny random Qwen3-MoE (transformers' own config class: experts, top-2 routing,
a dense first layer) with the demo model's tokenizer and chat template (qwen3 reasoning read from
it), so its words are noise: it never writes `<think>`, so (as in vLLM) a thinking budget would
never start counting; thinking is switched off in the template instead, and only the grammar
makes the output a call or an object. What this checks is that the MoE layers run under the
server's reasoning gate and constrained path, not what the model knows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from checkpoints import make_checkpoint
from thinkgate.engine.demo import DEMO_MODEL_DIR

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"},
                                           "sure": {"type": "boolean"}},
          "required": ["answer", "sure"], "additionalProperties": False}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def moe_server(server_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("qwen3_moe")
    demo = Path(DEMO_MODEL_DIR)
    config = json.loads((demo / "config.json").read_text())
    make_checkpoint(folder, "qwen3_moe", vocab_size=config["vocab_size"],
                    eos_token_id=config["eos_token_id"]).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):
        shutil.copy(demo / name, folder / name)
    return server_factory("--model", str(folder), "--served-model-name", "moe",
                          "--tool-call-parser", "hermes", "--enable-auto-tool-choice")


def test_moe_model_writes_forced_tool_calls(moe_server: Any) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=moe_server.url, api_key="unused", max_retries=0, timeout=120)
    for _ in range(2):
        out = client.chat.completions.create(
            model="moe", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS, tool_choice="required", max_tokens=80,
            extra_body=NO_THINKING)
        calls = out.choices[0].message.tool_calls
        assert calls, out.choices[0].message
        for call in calls:
            assert call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments),
                                TOOLS[0]["function"]["parameters"])


def test_moe_model_answers_a_json_schema_streamed(moe_server: Any) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=moe_server.url, api_key="unused", max_retries=0, timeout=120)
    stream = client.chat.completions.create(
        model="moe", messages=[{"role": "user", "content": "How many?"}], stream=True,
        max_tokens=60, extra_body=NO_THINKING,
        response_format={"type": "json_schema", "json_schema": {"name": "answer",
                                                                "schema": SCHEMA}})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), SCHEMA)
