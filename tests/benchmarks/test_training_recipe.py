"""The bundled models' recipes (`benchmarks/training/recipe.py`): every phase is a command
`train.py` accepts, each continues an earlier phase's output, and a run skips the phases that
are done. Nothing here trains: the phases' process is replaced by one that writes a file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from thinkgate.benchmarks.training import recipe
from thinkgate.benchmarks.training.train import build_parser


@pytest.mark.parametrize("name", sorted(recipe.RECIPES))
def test_each_phase_is_a_train_command_that_continues_the_one_before(name: str) -> None:
    work = Path("/tmp/recipe-work")
    done: list[str] = []
    for phase in recipe.RECIPES[name]:
        argv = recipe.command(phase, work)
        flags = [a for a in argv if a.startswith("--")]
        assert len(flags) == len(set(flags)), phase.name  # argparse would keep the last
        args = build_parser().parse_args(argv)
        assert args.out == work / phase.name
        assert args.resume and args.threads == 1
        if phase.start is None:
            assert args.init_from is None and not done  # random weights open the recipe
        else:
            assert phase.start in done, phase.name
            assert args.init_from == work / phase.start
        done.append(phase.name)
    assert args.model == name  # the last phase trains the model the recipe is named after


def test_the_demo_recipe_weighs_the_answer_late_and_ends_at_a_lower_rate() -> None:
    args = [build_parser().parse_args(recipe.command(p, Path("/w"))) for p in recipe.DEMO]
    weights = [a.answer_weight for a in args]
    assert weights[:3] == [1.0, 1.0, 1.0] and all(w == 3.0 for w in weights[3:])
    assert args[0].lr == 3e-3 and args[-1].lr == 1.5e-4  # a phase's own rate beats TUNE's
    assert all(a.lr == 3e-4 for a in args[1:-1])


def test_a_run_trains_the_missing_phases_only(tmp_path: Path, monkeypatch) -> None:
    trained: list[list[str]] = []

    def fake_run(argv, check, env):
        assert check and env["OMP_NUM_THREADS"] == "1"
        trained.append(argv)
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(out.name.encode())
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(recipe.subprocess, "run", fake_run)
    (tmp_path / "p1").mkdir()
    (tmp_path / "p1" / "model.safetensors").write_bytes(b"before")
    last = recipe.run("reasoner", tmp_path)
    assert last == tmp_path / "reasoner"
    assert [a[a.index("--out") + 1] for a in trained] == [str(tmp_path / "p2"),
                                                          str(tmp_path / "reasoner")]
    assert trained[0][1:3] == ["-m", "thinkgate.benchmarks.training.train"]
    trained.clear()
    assert recipe.run("demo", tmp_path, until="p2") == tmp_path / "p2"
    assert trained == []  # p1 and p2 are there


def test_an_unknown_phase_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'p9'"):
        recipe.run("demo", tmp_path, until="p9")
