"""`errors.to_error`: every exception → (status, OpenAI error body), without a server."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from thinkgate.api.errors import APIError, to_error
from thinkgate.api.protocol import ChatCompletionRequest, CompletionRequest

USER = [{"role": "user", "content": "x"}]


def _chat_error(body: dict) -> dict:
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(body)
    status, out = to_error(info.value)
    assert status == 400 and set(out["error"]) == {"message", "type", "param", "code"}
    assert out["error"]["type"] == "invalid_request_error"
    return out["error"]


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"messages": USER, "tool_choice": "sometimes",
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ({"messages": USER, "stop": 5}, "stop"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": USER, "n": 0}, "n"),
    ({"messages": USER, "tools": []}, "tools"),
    ({"messages": USER, "tool_choice": {"type": "function", "function": {"name": "g"}},
      "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": USER, "stream_options": {"include_usage": True}}, None),
])
def test_param_names(body: dict, param: str | None) -> None:
    assert _chat_error(body)["param"] == param


def test_unknown_field_message() -> None:
    err = _chat_error({"messages": USER, "functions_v2": []})
    assert err["param"] == "functions_v2"
    assert err["message"] == "Unrecognized request argument supplied: functions_v2"


def test_completion_prompt_union() -> None:
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate({"prompt": [[1], "a"]})
    assert to_error(info.value)[1]["error"]["param"] == "prompt"


def test_other_exceptions() -> None:
    assert to_error(APIError("full", 429, "rate_limit_error", None, "rate_limit_exceeded")) == (
        429, {"error": {"message": "full", "type": "rate_limit_error", "param": None,
                        "code": "rate_limit_exceeded"}})
    status, body = to_error(ValueError("temperature must be >= 0"))
    assert status == 400 and body["error"]["message"] == "temperature must be >= 0"
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads("{")
    assert to_error(info.value)[0] == 400
    status, body = to_error(RuntimeError("boom"))
    assert status == 500 and body["error"]["type"] == "server_error"
    assert "boom" not in body["error"]["message"]  # internals stay in the log
