"""A fuzz of every route on a real server: random bodies, ids and queries never get a 5xx.

Bodies are dictionaries over each route's own field names (from its pydantic request model)
plus unknown keys, with random JSON values, so many reach the validators and some reach the
engine; the length fields are pinned small so that a body that happens to be valid costs a few
tokens. Bounded: a fixed number of examples per run. Afterwards the server still answers a
plain request. Each dialect must answer in its own error shape.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thinkgate.api.anthropic.protocol import MessagesRequest
from thinkgate.api.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from thinkgate.api.responses.protocol import ResponsesRequest

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)

_ROUTES: dict[str, Any] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
    "/v1/messages": MessagesRequest,
    "/v1/messages/count_tokens": MessagesRequest,
    "/tokenize": TokenizeRequest,
    "/detokenize": DetokenizeRequest,
}
_SMALL = {"max_tokens": 4, "max_completion_tokens": 4, "max_output_tokens": 4, "n": 1,
          "best_of": 1, "min_tokens": 0}


def _fields(model: Any) -> list[str]:
    return sorted({info.alias or name for name, info in model.model_fields.items()})


def _body(route: str) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from(_fields(_ROUTES[route])) | st.text(max_size=5)
    return st.dictionaries(keys, _JSON, max_size=6).map(lambda d: {**d, **_SMALL})


def _shape_ok(route: str, response: httpx.Response) -> bool:
    """OpenAI's {"error": {...}} everywhere but Anthropic's routes."""
    body = response.json()
    if route.startswith("/v1/messages"):
        return body.get("type") == "error" and {"type", "message"} <= set(body["error"])
    return {"message", "type", "param", "code"} <= set(body["error"])


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_random_bodies_never_get_a_5xx(http: httpx.Client, route: str) -> None:
    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(body=_body(route), raw=st.binary(max_size=48))
    def run(body: dict[str, Any], raw: bytes) -> None:
        for r in (http.post(route, json=body), http.post(route, content=raw)):
            assert r.status_code < 500, (route, body, r.text[:300])
            if r.status_code >= 400:
                assert _shape_ok(route, r), (route, r.text[:300])

    run()


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(object_id=st.text(min_size=1, max_size=12),
       query=st.dictionaries(st.sampled_from(("limit", "after", "order", "stream",
                                              "starting_after")), st.text(max_size=6),
                             max_size=3))
def test_random_ids_and_queries_never_get_a_5xx(http: httpx.Client, object_id: str,
                                                 query: dict[str, str]) -> None:
    quoted = urllib.parse.quote(object_id, safe="")
    answers = [
        http.get(f"/v1/models/{quoted}"),
        http.get(f"/v1/responses/{quoted}", params=query),
        http.delete(f"/v1/responses/{quoted}"),
        http.post(f"/v1/responses/{quoted}/cancel"),
        http.get(f"/v1/batches/{quoted}"),
        http.get(f"/v1/files/{quoted}/content"),
        http.get(f"/{quoted}"),
    ]
    for r in answers:
        assert r.status_code < 500, (r.request.method, r.request.url, r.text[:300])


def test_the_server_still_serves_after_the_fuzz(http: httpx.Client) -> None:
    assert http.get("/health").status_code == 200
    r = http.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
