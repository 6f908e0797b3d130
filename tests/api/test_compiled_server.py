"""`thinkgate serve` as users start it: the engine core compiles its decode step before serving.

The rest of the suite runs engines eagerly (tests/conftest.py); this module clears that, so the
server's default path (torch.compile on CPU, engine/model/compiled_decode.py) answers real clients.
"""

from __future__ import annotations

from typing import Any

import pytest
from thinkgate.engine.model.compiled_decode import compiler_available

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="TorchInductor's CPU backend needs a C++ compiler")


@pytest.fixture(scope="module")
def compiled_server(server_factory: Any) -> Any:
    return server_factory(env={"THINKGATE_ENFORCE_EAGER": "0"},
                          startup_timeout_s=600.0)  # a cold TorchInductor cache: 1-2 min here


def test_the_server_compiled_before_it_became_healthy(compiled_server: Any) -> None:
    assert "decode step compiled with torch.compile" in compiled_server.log()


def test_streamed_chat_at_default_temperature_and_n(compiled_server: Any) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=compiled_server.url, api_key="unused", max_retries=0, timeout=120)
    chunks = list(client.chat.completions.create(
        model="thinkgate-demo", messages=[{"role": "user", "content": "Tell me a story"}],
        max_tokens=24, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    assert text or reasoning
    many = client.chat.completions.create(
        model="thinkgate-demo", messages=[{"role": "user", "content": "Hi"}], max_tokens=16,
        n=3, seed=5, temperature=0, logprobs=True)
    assert len(many.choices) == 3
    assert len({c.message.content for c in many.choices}) == 1  # greedy: the same three times
    assert all(c.logprobs.content for c in many.choices)
