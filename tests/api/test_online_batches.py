"""/v1/files + /v1/batches against a real `thinkgate serve` with the official `openai` client:
OpenAI's validation rules, the result files, list, cancel, delete, bad input, and a server killed
mid-batch that finishes the batch on restart without losing or repeating a finished line."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODEL = "thinkgate-demo"
TERMINAL = ("completed", "failed", "cancelled", "expired")
ORDER = ("validating", "in_progress", "finalizing", "completed")


def chat_line(custom_id: str, content: str, **body: Any) -> str:
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": body})


def completion_line(custom_id: str, prompt: str, max_tokens: int = 4) -> str:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": body})


def mixed_lines() -> tuple[list[str], dict[int, str]]:
    """20 lines: 14 good chats, 2 bad bodies (run, answered 400/404) and 4 lines OpenAI's
    validation rejects; returns the lines and {line number: expected error code}."""
    lines = [chat_line(f"good-{i}", f"What's the weather in city {i}?") for i in range(14)]
    lines.insert(4, chat_line("bad-max-tokens", "hi", max_tokens=-3))
    lines.insert(10, chat_line("bad-model", "hi", model="no-such-model"))
    rejected = {8: "invalid_json_line", 14: "invalid_url", 17: "duplicate_custom_id",
                20: "invalid_method"}
    lines.insert(7, '{"custom_id": "broken", "method": "POST", ')
    lines.insert(13, json.dumps({"custom_id": "embed", "method": "POST", "url": "/v1/embeddings",
                                 "body": {"model": MODEL, "input": "x"}}))
    lines.insert(16, chat_line("good-1", "a second good-1"))
    lines.append(json.dumps({"custom_id": "get", "method": "GET",
                             "url": "/v1/chat/completions", "body": {}}))
    assert len(lines) == 20
    return lines, rejected


def upload(client: openai.OpenAI, lines: list[str], name: str = "in.jsonl") -> Any:
    return client.files.create(file=(name, ("\n".join(lines) + "\n").encode()), purpose="batch")


def wait_batch(client: openai.OpenAI, batch_id: str, timeout: float = 180.0) -> tuple[Any, list]:
    """Poll until the batch is terminal; also returns the statuses seen, in order."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if not seen or seen[-1] != batch.status:
            seen.append(batch.status)
        if batch.status in TERMINAL:
            return batch, seen
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} still {seen[-1]} after {timeout} s")


def rows_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batch_dir")


def batch_flags(batch_dir: Path) -> tuple[str, ...]:
    return ("--batch-dir", str(batch_dir), "--max-batch-in-flight", "4")


@pytest.fixture(scope="module")
def server(server_factory: Any, batch_dir: Path) -> Any:
    return server_factory(*batch_flags(batch_dir))


def test_bad_lines_fail_the_batch_listing_each(client: openai.OpenAI) -> None:
    lines, rejected = mixed_lines()
    file = upload(client, lines)
    assert file.purpose == "batch" and file.bytes == len(("\n".join(lines) + "\n").encode())
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert batch.status == "validating" and batch.request_counts.total == 0
    batch, _ = wait_batch(client, batch.id)
    assert batch.status == "failed" and batch.failed_at is not None
    assert {e.line: e.code for e in batch.errors.data} == rejected
    assert all(str(e.line) in e.message for e in batch.errors.data)
    assert batch.output_file_id is None and batch.error_file_id is None


def test_round_trip_results_and_errors(client: openai.OpenAI) -> None:
    lines, rejected = mixed_lines()
    kept = [line for n, line in enumerate(lines, 1) if n not in rejected]
    file = upload(client, kept)
    created = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                    completion_window="24h", metadata={"run": "round-trip"})
    batch, seen = wait_batch(client, created.id)
    assert batch.status == "completed", batch.errors
    assert [s for s in ORDER if s in seen] == seen, seen
    assert batch.request_counts.total == 16
    assert (batch.request_counts.completed, batch.request_counts.failed) == (14, 2)
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    assert batch.metadata == {"run": "round-trip"} and batch.model == MODEL

    output = rows_of(client, batch.output_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(f"good-{i}" for i in range(14))
    for row in output:
        assert row["error"] is None and row["response"]["status_code"] == 200
        assert row["response"]["body"]["object"] == "chat.completion"
        assert row["response"]["body"]["usage"]["completion_tokens"] >= 1
    assert len({r["id"] for r in output}) == 14

    errors = {r["custom_id"]: r["response"] for r in rows_of(client, batch.error_file_id)}
    assert set(errors) == {"bad-max-tokens", "bad-model"}
    assert errors["bad-max-tokens"]["status_code"] == 400
    assert errors["bad-max-tokens"]["body"]["error"]["param"] == "max_tokens"
    assert errors["bad-model"]["status_code"] == 404
    assert errors["bad-model"]["body"]["error"]["code"] == "model_not_found"

    # the same engine and chat layer: a line's answer is what the route answers online
    body = json.loads(kept[0])["body"]
    online = client.chat.completions.create(**body)
    line = next(r for r in output if r["custom_id"] == "good-0")["response"]["body"]
    message = online.choices[0].message
    assert line["choices"][0]["message"]["content"] == message.content
    assert line["choices"][0]["message"]["reasoning"] == message.reasoning
    assert line["usage"]["completion_tokens"] == online.usage.completion_tokens

    out_file = client.files.retrieve(batch.output_file_id)
    assert out_file.purpose == "batch_output" and out_file.filename.endswith("_output.jsonl")


def test_completions_batch_and_listing(client: openai.OpenAI) -> None:
    data = "".join(completion_line(f"c{i}", f"x_{i} = ") + "\n" for i in range(3)).encode()
    file = client.files.create(file=("c.jsonl", data), purpose="batch",
                               expires_after={"anchor": "created_at", "seconds": 3600})
    assert file.expires_at == file.created_at + 3600
    first = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                  completion_window="24h")
    second = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                   completion_window="24h")
    for b in (first, second):
        done, _ = wait_batch(client, b.id)
        assert done.status == "completed" and done.request_counts.completed == 3
        bodies = [r["response"]["body"] for r in rows_of(client, done.output_file_id)]
        assert [b["object"] for b in bodies] == ["text_completion"] * 3
    page = client.batches.list(limit=1)
    assert [b.id for b in page.data] == [second.id] and page.has_more
    after = client.batches.list(limit=1, after=second.id)
    assert [b.id for b in after.data] == [first.id]
    listed = {f.id: f.purpose for f in client.files.list()}
    assert listed[file.id] == "batch" and listed[done.output_file_id] == "batch_output"
    assert file.id in {f.id for f in client.files.list(purpose="batch")}
    assert done.output_file_id not in {f.id for f in client.files.list(purpose="batch")}


def test_cancel_and_delete(client: openai.OpenAI) -> None:
    lines = [chat_line(f"long-{i}", f"Tell me about city {i}", max_tokens=64) for i in range(12)]
    file = upload(client, lines)
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="unfinished batch"):
        client.files.delete(file.id)  # resuming after a restart reads it again
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    batch, seen = wait_batch(client, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at >= batch.cancelling_at
    counts = batch.request_counts
    assert counts.completed + counts.failed < 12
    assert len(rows_of(client, batch.output_file_id)) == counts.completed
    with pytest.raises(openai.BadRequestError, match="cancelled"):
        client.batches.cancel(batch.id)

    deleted = client.files.delete(file.id)
    assert deleted.id == file.id and deleted.deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(file.id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(file.id)
    assert file.id not in {f.id for f in client.files.list()}


def test_bad_requests_are_400_or_404(client: openai.OpenAI, http: httpx.Client) -> None:
    file = upload(client, [completion_line("one", "a")])
    cases = [
        (dict(input_file_id="file-nope", endpoint="/v1/completions"), openai.NotFoundError,
         "file_id"),
        (dict(input_file_id=file.id, endpoint="/v1/embeddings"), openai.BadRequestError,
         "endpoint"),
        (dict(input_file_id=file.id, endpoint="/v1/completions", completion_window="1h"),
         openai.BadRequestError, "completion_window"),
        (dict(input_file_id=file.id, endpoint="/v1/completions", extra_body={"priority": 1}),
         openai.BadRequestError, "priority"),
        (dict(input_file_id=file.id, endpoint="/v1/completions",
              metadata={f"k{i}": "v" for i in range(17)}), openai.BadRequestError, "metadata"),
    ]
    for kwargs, error, param in cases:
        kwargs.setdefault("completion_window", "24h")
        with pytest.raises(error) as info:
            client.batches.create(**kwargs)
        assert info.value.body["param"] == param, (kwargs, info.value.body)
    with pytest.raises(openai.BadRequestError) as info:
        client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert info.value.body["param"] == "purpose"
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError):
        client.batches.cancel("batch_nope")

    done, _ = wait_batch(client, client.batches.create(
        input_file_id=file.id, endpoint="/v1/completions", completion_window="24h").id)
    with pytest.raises(openai.BadRequestError) as info:  # an output file is not an input
        client.batches.create(input_file_id=done.output_file_id, endpoint="/v1/completions",
                              completion_window="24h")
    assert info.value.body["param"] == "input_file_id"

    for method, path, kwargs, param in [
        ("POST", "/v1/files", {"json": {"purpose": "batch"}}, "file"),
        ("POST", "/v1/files", {"data": {"purpose": "batch"}, "files": {}}, "file"),
        ("POST", "/v1/files", {"data": {"purpose": "batch"},
                               "files": {"other": ("a", b"x")}}, "other"),
        ("GET", "/v1/batches?limit=0", {}, "limit"),
        ("GET", "/v1/batches?limit=abc", {}, "limit"),
        ("GET", "/v1/files?order=up", {}, "order"),
        ("GET", "/v1/files?after=file-nope", {}, "after"),
        ("POST", "/v1/batches", {"content": b"{not json"}, None),
    ]:
        r = http.request(method, path, **kwargs)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["param"] == param, (path, r.text)
    assert http.get("/health").status_code == 200


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=6)
_BATCH_KEYS = ("input_file_id", "endpoint", "completion_window", "metadata",
               "output_expires_after")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.dictionaries(st.sampled_from(_BATCH_KEYS) | st.text(max_size=5), _JSON,
                            max_size=5),
       query=st.dictionaries(st.sampled_from(("limit", "after", "order", "purpose")),
                             st.text(max_size=6), max_size=3),
       form=st.dictionaries(st.sampled_from(("purpose", "file", "expires_after[anchor]",
                                             "expires_after[seconds]", "x")),
                            st.text(max_size=6), max_size=4),
       blob=st.binary(max_size=64), object_id=st.text(min_size=1, max_size=12))
def test_fuzzed_input_never_gets_a_5xx(http: httpx.Client, body: dict, query: dict,
                                       form: dict, blob: bytes, object_id: str) -> None:
    """Bounded: 60 examples of random bodies, queries, forms and ids over these routes."""
    quoted = urllib.parse.quote(object_id, safe="")
    answers = [
        http.post("/v1/batches", json=body),
        http.post("/v1/batches", content=blob),
        http.get("/v1/batches", params=query),
        http.get("/v1/files", params=query),
        http.post("/v1/files", data=form, files={"file": ("f.jsonl", blob)}),
        http.post("/v1/files", data=form),
        http.get(f"/v1/files/{quoted}"),
        http.get(f"/v1/files/{quoted}/content"),
        http.delete(f"/v1/files/{quoted}"),
        http.get(f"/v1/batches/{quoted}"),
        http.post(f"/v1/batches/{quoted}/cancel"),
    ]
    for r in answers:
        assert r.status_code < 500, (r.request.method, r.request.url, r.text)
        if r.status_code >= 400:
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_responses_endpoint(client: openai.OpenAI, http: httpx.Client) -> None:
    if "/v1/responses" not in http.get("/openapi.json").json()["paths"]:
        pytest.skip("this build serves no /v1/responses route yet")
    line = json.dumps({"custom_id": "r1", "method": "POST", "url": "/v1/responses",
                       "body": {"model": MODEL, "input": "hi", "max_output_tokens": 8}})
    file = upload(client, [line])
    batch, _ = wait_batch(client, client.batches.create(
        input_file_id=file.id, endpoint="/v1/responses", completion_window="24h").id)
    assert batch.status == "completed", batch
    [row] = rows_of(client, batch.output_file_id)
    assert row["response"]["body"]["object"] == "response"


def _journal_rows(path: Path) -> dict[str, dict[str, Any]]:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    whole = text[: text.rfind("\n") + 1]
    rows = [json.loads(x)["result"] for x in whole.splitlines()]
    return {r["custom_id"]: r for r in rows}


def test_killed_server_resumes_the_batch(server: Any, server_factory: Any, batch_dir: Path,
                                         client: openai.OpenAI) -> None:
    """Last in this module: it kills the module's server (one server start fewer)."""
    # enough work (4 lines in flight at a time) that the kill lands with lines still to run
    ids = [f"p{i}" for i in range(48)]
    file = upload(client, [completion_line(c, f"item_{c} = ", max_tokens=16) for c in ids])
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                  completion_window="24h")
    journal = batch_dir / "batches" / f"{batch.id}.journal"
    deadline = time.monotonic() + 120
    while len(_journal_rows(journal)) < 3:
        assert time.monotonic() < deadline, "the batch made no progress"
        time.sleep(0.01)
    os.killpg(server.proc.pid, signal.SIGKILL)  # the server and its engine core, no cleanup
    server.proc.wait()
    before = _journal_rows(journal)
    assert 3 <= len(before) < len(ids), "the kill came too late to test a resume"
    saved = json.loads((batch_dir / "batches" / f"{batch.id}.json").read_text())

    second = server_factory(*batch_flags(batch_dir))
    client = openai.OpenAI(base_url=second.url, api_key="unused", max_retries=0, timeout=60)
    done, _ = wait_batch(client, batch.id)
    assert done.status == "completed" and done.request_counts.completed == len(ids)
    assert done.in_progress_at == saved["in_progress_at"]
    output = rows_of(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(ids)  # each line exactly once
    by_id = {r["custom_id"]: r for r in output}
    for custom_id, row in before.items():  # finished before the kill: kept, not run again
        assert by_id[custom_id] == row
    assert client.batches.retrieve(batch.id).status == "completed"
    assert len(client.files.list(purpose="batch").data) >= 5  # the earlier uploads are still there
