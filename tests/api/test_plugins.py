"""--reasoning-parser-plugin / --tool-parser-plugin on a live server, and bad parser names."""

from __future__ import annotations

import json
import subprocess

import pytest
from thinkgate.engine.demo.data import TOOLS

PLUGIN = """
from thinkgate.parsers import get_reasoning_format, get_tool_format
from thinkgate.parsers import register_reasoning_parser, register_tool_parser

register_reasoning_parser("plugin_think")(get_reasoning_format("qwen3"))
register_tool_parser("plugin_calls")(get_tool_format("hermes"))
"""


@pytest.fixture(scope="module")
def plugin_server(server_factory, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("plugin") / "my_parsers.py"
    path.write_text(PLUGIN)
    return server_factory("--reasoning-parser-plugin", str(path), "--tool-parser-plugin",
                          str(path), "--reasoning-parser", "plugin_think",
                          "--tool-call-parser", "plugin_calls")


def test_plugin_parsers_serve_tool_calls(plugin_server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=plugin_server.url, api_key="x", max_retries=0)
    # tool_choice auto: the plugin formats parse the output
    out = client.chat.completions.create(
        model="thinkgate-demo", tools=[TOOLS["get_weather"]], max_tokens=128, temperature=0,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    msg = out.choices[0].message
    assert msg.model_dump()["reasoning"]
    assert out.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls and msg.tool_calls[0].function.name == "get_weather"
    assert isinstance(json.loads(msg.tool_calls[0].function.arguments), dict)


def test_plugin_tool_format_constrains_a_named_call(plugin_server) -> None:
    """A plugin's data-driven tool format brings its grammar: a named call is schema-valid."""
    import jsonschema
    from openai import OpenAI

    client = OpenAI(base_url=plugin_server.url, api_key="x", max_retries=0)
    weather = TOOLS["get_weather"]
    out = client.chat.completions.create(
        model="thinkgate-demo", tools=[weather], max_tokens=96, temperature=1.0, seed=3,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "Hello!"}],
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    calls = out.choices[0].message.tool_calls
    assert calls and [c.function.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].function.arguments),
                        weather["function"]["parameters"])


def test_unknown_parser_name_fails_fast(plugin_server) -> None:
    cmd = [*plugin_server.program, "serve", "--tool-call-parser", "no_such_parser",
           "--port", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no_such_parser" in out.stderr and "hermes" in out.stderr
    assert "Traceback" not in out.stderr
