"""bench_startup's commands: the checkout under test, another checkout first on the path, and
vLLM's server, each eager and without the interpreter setting of the test run."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from thinkgate.benchmarks.bench_startup import commands


def test_the_ref_checkout_is_the_one_imported(tmp_path: Path) -> None:
    ref = tmp_path / "checkout"
    ref.mkdir()
    (ref / "__init__.py").write_text("MARK = 'the other checkout'\n")
    args = argparse.Namespace(ref=str(ref), vllm_python="/opt/vllm/bin/python")
    cmds = commands(args, "/models/demo")
    assert set(cmds) == {"thinkgate", "thinkgate-ref", "vllm"}
    for cmd, env, _ in cmds.values():
        assert "--enforce-eager" in cmd and "TRITON_INTERPRET" not in env
        assert "/models/demo" in cmd
    cmd, env, cwd = cmds["thinkgate-ref"]
    assert cmd[:3] == [sys.executable, "-m", "thinkgate.api.cli"]
    out = subprocess.run([sys.executable, "-c", "import thinkgate; print(thinkgate.MARK)"],
                         env=env, cwd=cwd, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "the other checkout"
    assert cmds["vllm"][0][:3] == ["/opt/vllm/bin/python", "-m",
                                   "vllm.entrypoints.openai.api_server"]
