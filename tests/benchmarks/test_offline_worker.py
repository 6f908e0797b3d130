"""bench_vs_vllm's offline side: `offline_worker.py` (thinkgate engine) via `OfflineClient`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from thinkgate.benchmarks.offline_worker import OfflineClient
from thinkgate.engine.demo import demo_model_path

WORKER = Path(__file__).resolve().parents[2] / "benchmarks" / "offline_worker.py"


def test_worker_answers_timed_generate_calls_and_exits_on_close() -> None:
    cmd = [sys.executable, str(WORKER), "--engine", "thinkgate", "--model",
           str(demo_model_path())]
    with tempfile.TemporaryFile("w+") as log:
        client = OfflineClient(cmd, log)
        try:
            client.wait_ready(timeout=300)
            prompts = [[11, 12, 13, 14], [21, 22, 23]]
            greedy = client.run(prompts, 0.0, 5, warmup=True)
            sampled = client.run(prompts, 1.0, 7, warmup=False)
        finally:
            client.close()
    assert greedy["tokens"] == 10 and greedy["seconds"] > 0
    assert sampled["tokens"] == 14 and sampled["seconds"] > 0
    assert client.proc.returncode == 0
