"""`thinkgate serve --replicas 2` on a local Ray Serve: the official openai client against the
replicated app (streamed and not, both replicas serve; prompts sharing a prefix meet on one
replica), then one replica's engine core killed mid-stream while a 50-line batch runs: that
stream ends with an error, the other replica keeps serving, /health says degraded, and the batch
completes with every custom_id once."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray.serve", reason="the `ray-serve` extra is not installed")

MODEL = "thinkgate-demo"
REPLICA_HEADER = "x-thinkgate-replica"


@pytest.fixture(scope="module")
def ray_sessions():
    """Pids of the Ray drivers started here; their session folders are removed at the end."""
    drivers: list[int] = []
    yield drivers
    root = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"
    for pid in drivers:
        for session in root.glob(f"session_*_{pid}"):
            shutil.rmtree(session, ignore_errors=True)


@pytest.fixture(scope="module")
def replicated(ray_sessions, server_factory, tmp_path_factory):
    batch_dir = tmp_path_factory.mktemp("batches")
    flags = ("--replicas", "2", "--enforce-eager", "--max-num-seqs", "8",
             "--batch-dir", str(batch_dir))
    try:
        srv = server_factory(*flags, startup_timeout_s=240)
    except RuntimeError as err:
        # The test's port is picked free and released (`free_port`); Ray then starts a dozen
        # listeners on ports the kernel hands out, and one took it once (Serve's proxy: "Failed
        # to bind to address"). That race is the test's, not the server's: one more start on
        # another port; any other failure, or the same one again, fails the test.
        if "Failed to bind to address" not in str(err):
            raise
        srv = server_factory(*flags, startup_timeout_s=240)
    ray_sessions.append(srv.proc.pid)
    deadline = time.monotonic() + 120
    while httpx.get(f"{srv.base}/health", timeout=5).json()["status"] != "ok":
        assert time.monotonic() < deadline, "the second replica never started"
        time.sleep(0.5)
    return srv


@pytest.fixture(scope="module")
def client(replicated):
    from openai import OpenAI

    return OpenAI(base_url=replicated.url, api_key="unused", max_retries=0, timeout=60)


def replica_pid(header: str) -> int:
    """`<replica id>@<host>:<pid>` → the replica process's pid."""
    return int(header.rsplit(":", 1)[1])


def engine_core_pid(replica: int) -> int:
    for task in Path(f"/proc/{replica}/task").iterdir():
        for pid in (task / "children").read_text().split():
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return int(pid)
    raise AssertionError(f"replica {replica} has no engine core process")


def chat(client, content: str, **kwargs):
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": content}], temperature=0, **kwargs)


def test_two_replicas_answer_chat_streamed_and_not(client, replicated) -> None:
    raw = chat(client, "What is 2+2?", max_tokens=16)
    answer = raw.parse()
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage.completion_tokens > 0
    assert REPLICA_HEADER in raw.headers

    def streamed(i: int) -> tuple[str, list[str | None]]:
        raw = chat(client, f"Count to {i}.", max_tokens=24, stream=True)
        reasons = [chunk.choices[0].finish_reason for chunk in raw.parse() if chunk.choices]
        return raw.headers[REPLICA_HEADER], reasons

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        served = list(pool.map(streamed, range(8)))
    assert len({replica for replica, _ in served}) == 2, served
    assert all(len(reasons) > 2 and reasons[-1] in ("stop", "length") for _, reasons in served)
    replicas = {replica for replica, _ in served}
    deadline = time.monotonic() + 15  # replicas post their counters every 2 s
    while True:  # /metrics: every replica's series, labelled
        metrics = httpx.get(f"{replicated.base}/metrics", timeout=10).text
        tokens = generation_tokens(metrics)
        if all(tokens.get(replica, 0) > 0 for replica in replicas):
            break
        assert time.monotonic() < deadline, tokens
        time.sleep(0.5)


def generation_tokens(metrics: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {sample.labels["replica"]: sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples if sample.name == "thinkgate_generation_tokens_total"}


def test_prompts_sharing_a_prefix_go_to_one_replica(client) -> None:
    served: dict[int, set[str]] = {}
    for turn in range(3):
        for topic in range(4):
            system = f"You are assistant number {topic}. " + "Answer briefly and politely. " * 30
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, max_tokens=2, temperature=0,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": f"Question {turn}?"}])
            served.setdefault(topic, set()).add(raw.headers[REPLICA_HEADER])
    assert all(len(replicas) == 1 for replicas in served.values()), served


def batch_input(n: int) -> bytes:
    import json

    lines = [{"custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": MODEL, "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                       "messages": [{"role": "user", "content": f"Batch question {i}."}]}}
             for i in range(n)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_a_dead_engine_fails_its_streams_and_the_other_replica_serves(client, replicated):
    import json

    import openai

    uploaded = client.files.create(file=("in.jsonl", batch_input(50)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    raw = chat(client, "Tell me a long story.", max_tokens=1800, stream=True,
               extra_body={"ignore_eos": True})
    victim = raw.headers[REPLICA_HEADER]
    chunks = 0
    with pytest.raises(openai.APIError, match="engine") as caught:
        for _ in raw.parse():
            chunks += 1
            if chunks == 3:
                os.kill(engine_core_pid(replica_pid(victim)), signal.SIGKILL)
    assert chunks >= 3 and "exit code -9" in str(caught.value)

    # the replica leaves once its streams have their error (a request landing on it meanwhile
    # gets a 503 engine_dead, which clients retry); from then on Serve routes around it
    gone_by = time.monotonic() + 15
    while Path(f"/proc/{replica_pid(victim)}").exists():
        assert time.monotonic() < gone_by, "the replica with the dead engine did not leave"
        time.sleep(0.1)
    served = set()
    for i in range(6):  # new requests go to the live replica
        raw = chat(client, f"Say {i}.", max_tokens=4)
        assert raw.parse().choices[0].message is not None
        served.add(raw.headers[REPLICA_HEADER])
    assert victim not in served
    seen = set()
    noticed_by = time.monotonic() + 20  # Serve's controller notices the replica's death
    while "degraded" not in seen:
        assert time.monotonic() < noticed_by, f"/health never said degraded: {seen}"
        health = httpx.get(f"{replicated.base}/health", timeout=10)
        assert health.status_code == 200, health.text  # degraded, never dead
        seen.add(health.json()["status"])
        time.sleep(0.2)
    print(f"degraded after {20 - (noticed_by - time.monotonic()):.1f} s")
    assert health.json()["replicas"] == {"serving": 1, "target": 2}
    assert replicated.alive()

    # the batch, submitted before the kill, has every line once
    finished_by = time.monotonic() + 90
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < finished_by, batch
        time.sleep(0.5)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed) == (50, 50), batch
    rows = [json.loads(line) for line in
            client.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(row["custom_id"] for row in rows) == sorted(f"line-{i}" for i in range(50))
    assert all(row["response"]["body"]["usage"]["completion_tokens"] == 48 for row in rows)
    assert batch.error_file_id is None


def test_build_app_takes_serve_flags_as_a_list_or_a_dict() -> None:
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from thinkgate.api.ray_serve import app_builder, build_app

    # `serve run thinkgate.api.ray_serve:app_builder replicas=3 enforce_eager=true ...`
    app = call_user_app_builder_with_args_if_necessary(app_builder, {"enforce_eager": "true", "replicas": "3", "max_concurrent_requests": 64,
                     "trust_remote_code": False})
    ingress = app._bound_deployment  # one ingress in front of the engine replicas
    assert ingress.num_replicas == 1
    deployment = ingress.init_args[1]._bound_deployment
    assert (deployment.num_replicas, deployment.max_ongoing_requests) == (3, 64)
    router = deployment._deployment_config.request_router_config
    assert router.request_router_kwargs == {"mode": "prefix"}
    flags = deployment.init_args[0]
    assert flags["enforce_eager"] and not flags["trust_remote_code"]
    assert flags["served_model_name"] == [MODEL]
    assert not flags["engine_in_process"]  # each replica's engine core: a process of its own
    app = build_app(["--max-num-seqs", "8", "--replica-routing", "round_robin"],
                    num_replicas=2)
    deployment = app._bound_deployment.init_args[1]._bound_deployment
    assert deployment.num_replicas == 2
    assert deployment._deployment_config.request_router_config.request_router_kwargs == {
        "mode": "round_robin"}
    with pytest.raises(ValueError, match="num_replicas must be >= 1, got 0"):
        build_app([], num_replicas=0)
    with pytest.raises(ValueError, match="balance must be >= 1.0, got 0.9"):
        build_app([], routing_options={"balance": 0.9})
