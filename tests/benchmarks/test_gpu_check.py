"""gpu_check.sh and bench_gpu_engine run as far as a CPU allows (their dry runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from thinkgate.benchmarks import bench_gpu_engine
from thinkgate.engine.demo import demo_model_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_wheels.sh"])
def test_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)], check=True)


def test_engine_benchmark_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three engines (graphs = the CUDA-graph buffer path with the capture skipped, eager
    paged kernels, gather), plain and JSON-constrained, on the demo model; tables written."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the kernels' twins, as on CPU
    threads = torch.get_num_threads()
    try:
        result = bench_gpu_engine.main(["--dry-run", "--out", str(tmp_path), "--model",
                                        demo_model_path(), "--batches", "2", "--tokens", "2"])
    finally:
        torch.set_num_threads(threads)
    assert set(result["engines"]) == {"graphs", "eager", "gather"}
    for rows in result["engines"].values():
        assert [(r["batch"], r["constrained"]) for r in rows] == [(2, False), (2, True)]
        assert all(r["tok_s"] > 0 for r in rows)
    table = (tmp_path / "engine.md").read_text()
    assert "DRY RUN" in table and "| 2 | json |" in table and "graphs / eager" in table
    assert json.loads((tmp_path / "engine.json").read_text())["dry_run"] is True


@pytest.mark.slow  # builds the tiny real-vocabulary model (~15 s CPU) and runs three engines
def test_gpu_check_dry_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WORK": str(tmp_path / "work"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT.parent),
                                                       os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "out"
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", str(out)],
                   env=env, check=True, timeout=900)
    summary = (out / "summary.txt").read_text()
    assert "tests collected: rc=0" in summary and "engine benchmark (dry run): rc=0" in summary
    assert "model-tiny" in (out / "engine.md").read_text()
    assert len(list(out.iterdir())) <= 8  # what the device tool brings back
