"""`thinkgate run-batch`: mixed endpoints, malformed lines, --resume, and the Ray Data run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = "thinkgate-demo"


def _write_input(path: Path) -> list[str]:
    """48 valid requests (chat and completions alternating) and 2 malformed lines; returns the
    custom_ids of the valid ones."""
    lines, ids = [], []
    for i in range(48):
        if i % 2:
            body = {"model": MODEL, "max_tokens": 12, "temperature": 0,
                    "messages": [{"role": "user", "content": f"What's the time in city {i}?"}]}
            url = "/v1/chat/completions"
        else:
            body = {"model": MODEL, "prompt": f"value_{i} = ", "max_tokens": 6, "temperature": 0}
            url = "/v1/completions"
        ids.append(f"req-{i}")
        lines.append(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url,
                                 "body": body}))
    lines.insert(7, "{this line is not json")
    lines.insert(33, json.dumps({"custom_id": "bad-url", "method": "POST",
                                 "url": "/v1/embeddings", "body": {}}))
    path.write_text("\n".join(lines) + "\n")
    return ids


def _thinkgate() -> list[str]:
    script = Path(sys.executable).parent / "thinkgate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "thinkgate.api.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    model = os.environ.get("THINKGATE_TEST_MODEL")
    extra = ["--model", model, "--served-model-name", MODEL] if model else []
    cmd = [*_thinkgate(), "run-batch", *args, "--no-progress", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "0"})  # as tests/api/conftest.py
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _results(path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    keyed = {r["custom_id"] or r["id"]: r for r in rows}
    assert len(keyed) == len(rows), "duplicate result lines"
    return keyed


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], dict[str, dict]]:
    d = tmp_path_factory.mktemp("batch")
    ids = _write_input(d / "in.jsonl")
    _run("-i", str(d / "in.jsonl"), "-o", str(d / "out.jsonl"))
    return d, ids, _results(d / "out.jsonl")


def test_batch_results(batch) -> None:
    _, ids, results = batch
    assert len(results) == 50
    for cid in ids:
        row = results[cid]
        assert row["error"] is None and row["response"]["status_code"] == 200
        body = row["response"]["body"]
        i = int(cid.split("-")[1])
        assert body["object"] == ("chat.completion" if i % 2 else "text_completion")
        assert body["usage"]["completion_tokens"] >= 1
    bad_json = results["batch_req_00000008"]
    assert bad_json["custom_id"] is None and bad_json["response"] is None
    assert "not valid JSON" in bad_json["error"]["message"]
    assert "url must be one of" in results["bad-url"]["error"]["message"]


def test_batch_body_errors_are_per_line(tmp_path: Path) -> None:
    lines = [
        {"custom_id": "ok", "method": "POST", "url": "/v1/completions",
         "body": {"model": MODEL, "prompt": "a", "max_tokens": 2}},
        {"custom_id": "bad-body", "method": "POST", "url": "/v1/completions",
         "body": {"model": MODEL, "prompt": "a", "max_tokens": -3}},
        {"custom_id": "ok", "method": "POST", "url": "/v1/completions",
         "body": {"model": MODEL, "prompt": "b", "max_tokens": 2}},
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    _run("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"))
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert by_id["batch_req_00000001"]["response"]["status_code"] == 200
    bad = by_id["batch_req_00000002"]["response"]
    assert bad["status_code"] == 400 and bad["body"]["error"]["param"] == "max_tokens"
    assert "duplicate custom_id" in by_id["batch_req_00000003"]["error"]["message"]


def test_resume_skips_finished(batch, tmp_path: Path) -> None:
    d, _, full = batch
    out = tmp_path / "out.jsonl"
    kept = (d / "out.jsonl").read_text().splitlines()[:20]
    out.write_text("\n".join(kept) + "\n" + kept[20 - 1][:25])  # an interrupted half line
    run = _run("-i", str(d / "in.jsonl"), "-o", str(out), "--resume")
    assert "20 of 50 lines already done; running 30" in run.stdout
    resumed = _results(out)
    assert resumed.keys() == full.keys()
    assert [json.loads(x) for x in out.read_text().splitlines()[:20]] == \
        [json.loads(x) for x in kept]
    again = _run("-i", str(d / "in.jsonl"), "-o", str(out), "--resume")
    assert "nothing to run" in again.stdout and len(out.read_text().splitlines()) == 50


def test_ray_two_replicas_match_single_process(batch, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the `ray` extra is not installed")
    d, _, single = batch
    out = tmp_path / "out_ray.jsonl"
    run = _run("-i", str(d / "in.jsonl"), "-o", str(out), "--ray", "--num-replicas", "2")
    assert "(2 Ray replicas)" in run.stdout
    on_ray = _results(out)
    assert on_ray.keys() == single.keys()
    for key, row in single.items():
        other = on_ray[key]
        if row["response"] is None:
            assert other["error"] == row["error"]
            continue
        a, b = row["response"]["body"], other["response"]["body"]
        assert other["response"]["status_code"] == row["response"]["status_code"]
        assert a["choices"] == b["choices"] and a["usage"] == b["usage"], key


def test_run_batch_help() -> None:
    for sub in ("serve", "run-batch", "chat", "bench"):
        out = subprocess.run([*_thinkgate(), sub, "--help"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and "usage: thinkgate " + sub in out.stdout
