"""`thinkgate serve --speculative-config ...` answered through the official client: streamed
and structured outputs equal the server without drafts, and /metrics counts kept drafts."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 1}
SCHEMA = {"type": "object", "properties": {"items": {
    "type": "array", "minItems": 3, "maxItems": 4, "items": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 10}},
        "required": ["name"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


@pytest.fixture(scope="module")
def servers(server: Any, server_factory: Any) -> tuple[Any, Any]:
    """The shared default server, and one with drafts."""
    return server, server_factory("--speculative-config", json.dumps(SPEC))


def _chat(server: Any, **body: Any) -> Any:
    from openai import OpenAI

    client = OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    return client.chat.completions.create(model="thinkgate-demo", **body)


def test_structured_and_streamed_answers_equal_the_plain_servers(servers) -> None:
    plain, spec = servers
    body = {"messages": [{"role": "user", "content": "List items: a b a b a b"}],
            "max_tokens": 120, "temperature": 0, "n": 2,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "items", "schema": SCHEMA}},
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    want, got = _chat(plain, **body), _chat(spec, **body)
    assert [c.message.content for c in got.choices] == [c.message.content for c in want.choices]
    for choice in got.choices:
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), SCHEMA)
    stream = {"messages": [{"role": "user", "content": "Say it again: red blue red blue red"}],
              "max_tokens": 40, "temperature": 0, "stream": True}
    texts = []
    for server in (plain, spec):
        chunks = list(_chat(server, **stream))
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                     + "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                               for c in chunks if c.choices))
    assert texts[1] == texts[0] and texts[0]
    metrics = httpx.get(spec.base + "/metrics", timeout=30).text
    accepted = re.search(r"^thinkgate_spec_decode_num_accepted_tokens_total\{[^}]*\} (\S+)",
                         metrics, re.MULTILINE)
    assert accepted is not None and float(accepted.group(1)) > 0
    per_request = {name: float(re.search(rf"^thinkgate_spec_decode_{name}\{{[^}}]*\}} (\S+)",
                                         metrics, re.MULTILINE).group(1))  # type: ignore[union-attr]
                   for name in ("requests", "request_acceptance_rate_sum",
                                "request_mean_accepted_length_sum")}
    assert per_request["requests"] > 0
    assert 0 < per_request["request_acceptance_rate_sum"] <= per_request["requests"]
    assert per_request["request_mean_accepted_length_sum"] > per_request["requests"]
