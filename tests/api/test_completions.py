"""/v1/completions, /v1/models, /health, /tokenize, /detokenize and /metrics on a live server."""

from __future__ import annotations

import re

import openai
import pytest

MODEL = "thinkgate-demo"


def test_health_and_models(http, client) -> None:
    assert http.get("/health").status_code == 200
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].owned_by == "thinkgate"
    assert client.models.retrieve(MODEL).id == MODEL


def test_completion_text_and_usage(client) -> None:
    out = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=6,
                                    temperature=0)
    assert out.object == "text_completion"
    assert len(out.choices) == 1 and out.choices[0].index == 0
    assert out.choices[0].finish_reason in ("length", "stop")
    assert isinstance(out.choices[0].text, str)
    assert out.usage.completion_tokens <= 6
    assert out.usage.prompt_tokens > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_completion_greedy_is_deterministic_and_stream_matches(client) -> None:
    kwargs = dict(model=MODEL, prompt="import os\n", max_tokens=8, temperature=0)
    full = client.completions.create(**kwargs)
    chunks = list(client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_completion_many_prompts_and_n(client) -> None:
    out = client.completions.create(model=MODEL, prompt=["a = 1", "b = 2"], n=2, max_tokens=3,
                                    temperature=0.8, seed=1)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]


def test_completion_token_prompt_and_echo(client, http) -> None:
    ids = http.post("/tokenize", json={"prompt": "x = 1"}).json()["tokens"]
    out = client.completions.create(model=MODEL, prompt=ids, max_tokens=2, temperature=0,
                                    echo=True)
    assert out.choices[0].text.startswith("x = 1")


def test_completion_logprobs(client) -> None:
    out = client.completions.create(model=MODEL, prompt="for i in", max_tokens=4, temperature=0,
                                    logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4 or \
        out.choices[0].finish_reason == "stop"
    assert all(v <= 0.0 for v in lp.token_logprobs)
    assert all(1 <= len(top) <= 2 for top in lp.top_logprobs)
    # greedy: the chosen token is the most likely one
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen == pytest.approx(max(top.values()), abs=1e-4)


def test_tokenize_detokenize_roundtrip(http) -> None:
    tok = http.post("/tokenize", json={"prompt": "hello world", "return_token_strs": True}).json()
    assert tok["count"] == len(tok["tokens"]) > 0 and len(tok["token_strs"]) == tok["count"]
    assert tok["max_model_len"] > 0
    back = http.post("/detokenize", json={"tokens": tok["tokens"]}).json()
    assert back["prompt"] == "hello world"
    bad = http.post("/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


def test_metrics_after_requests(client, http) -> None:
    client.completions.create(model=MODEL, prompt="x", max_tokens=3)
    text = http.get("/metrics").text
    assert "thinkgate_requests_total" in text
    ttft = re.search(r"^thinkgate_time_to_first_token_seconds_count\{[^}]*\} (\S+)", text, re.M)
    gen = re.search(r"^thinkgate_generation_tokens_total\{[^}]*\} (\S+)", text, re.M)
    assert ttft and float(ttft.group(1)) >= 1
    assert gen and float(gen.group(1)) >= 1
    for name in ("thinkgate_inter_token_latency_seconds_bucket", "thinkgate_num_requests_waiting",
                 "thinkgate_kv_cache_usage_perc", "thinkgate_prompt_tokens_total"):
        assert name in text


@pytest.mark.parametrize("body, param", [
    ({"model": MODEL, "prompt": "x", "max_tokens": "lots"}, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "bogus_field": 1}, "bogus_field"),
    ({"model": MODEL, "prompt": []}, "prompt"),
    ({"model": MODEL, "prompt": "x", "temperature": -1}, "temperature"),
    ({"model": MODEL, "prompt": "x", "logprobs": 9}, "logprobs"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 10**7}, "prompt"),
    ({"model": MODEL, "prompt": [10**9]}, "prompt"),
])
def test_completion_bad_requests_are_400(http, body, param) -> None:
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert http.get("/health").status_code == 200


def test_context_length_exceeded(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="word " * 5000, max_tokens=4)
    assert info.value.code == "context_length_exceeded"


def test_malformed_json_and_unknown_model(http, client) -> None:
    r = http.post("/v1/completions", content=b"{not json", headers={"content-type":
                                                                    "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    assert info.value.code == "model_not_found"
    assert http.get("/nope").status_code == 404
    assert client.completions.create(model=MODEL, prompt="x", max_tokens=2).choices


def test_a_repeated_prefix_is_served_from_the_cache(client, http) -> None:
    def counter(name: str) -> float:
        found = re.search(rf"^{name}_total\{{[^}}]*\}} (\S+)", http.get("/metrics").text, re.M)
        assert found, f"{name} not in /metrics"
        return float(found.group(1))

    system = "You are a careful assistant who answers in one short sentence. " * 20
    hits = counter("thinkgate_prefix_cache_hits")
    usages = []
    for question in ("What is two plus two?", "Name a colour."):
        out = client.chat.completions.create(
            model=MODEL, max_tokens=2, temperature=0,
            messages=[{"role": "system", "content": system},
                      {"role": "user", "content": question}])
        usages.append(out.usage)
    cached = usages[1].prompt_tokens_details.cached_tokens
    assert 16 * 10 <= cached < usages[1].prompt_tokens  # the system prompt's full blocks
    assert counter("thinkgate_prefix_cache_hits") - hits >= cached
    assert counter("thinkgate_prefix_cache_queries") >= counter("thinkgate_prefix_cache_hits")


def test_metrics_name_the_grammar_backend_of_each_compile(client, http) -> None:
    """A JSON schema compiles with llguidance under `auto`, an EBNF grammar with xgrammar; each
    backend's compiles are counted in /metrics, with the compile cache's size."""
    def compiles(text: str, backend: str) -> float:
        found = re.search(r"^thinkgate_structured_output_compiles_total\{[^}]*backend=\""
                          + backend + r"\"[^}]*\} (\S+)", text, re.M)
        return float(found.group(1)) if found else 0.0

    before = http.get("/metrics").text
    schema = {"type": "object", "properties": {"metric_probe": {"type": "integer"}}}
    client.chat.completions.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "json_schema", "json_schema": {"name": "m", "schema": schema}})
    client.completions.create(model=MODEL, prompt="x", max_tokens=3, extra_body={
        "structured_outputs": {"grammar": 'root ::= "metric" [a-z]*'}})
    after = http.get("/metrics").text
    assert compiles(after, "guidance") == compiles(before, "guidance") + 1
    assert compiles(after, "xgrammar") == compiles(before, "xgrammar") + 1
    entries = re.search(r"^thinkgate_grammar_cache_entries\{[^}]*\} (\S+)", after, re.M)
    assert entries and float(entries.group(1)) >= 2


def test_metrics_show_tool_sets_served_from_the_caches(client, http) -> None:
    """`required` over tools compiles once; the same tools in another order are the same
    grammar (a compile-cache hit), and their parameter schemas are kept (schema cache)."""
    def value(text: str, name: str) -> float:
        found = re.search(rf"^{name}\{{[^}}]*\}} (\S+)", text, re.M)
        return float(found.group(1)) if found else 0.0

    tools = [{"type": "function", "function": {"name": f"probe_{i}", "parameters": {
        "type": "object", "properties": {f"arg_{i}": {"type": "integer"}}}}} for i in range(3)]
    ask = {"model": MODEL, "max_tokens": 4, "tool_choice": "required",
           "messages": [{"role": "user", "content": "hi"}]}
    client.chat.completions.create(tools=tools, **ask)
    before = http.get("/metrics").text
    client.chat.completions.create(tools=tools[::-1], **ask)
    after = http.get("/metrics").text
    assert value(after, "thinkgate_grammar_cache_hits_total") > value(
        before, "thinkgate_grammar_cache_hits_total")
    assert value(after, "thinkgate_schema_cache_entries") >= 3
