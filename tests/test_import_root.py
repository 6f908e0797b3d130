"""The checkout root is the package `thinkgate`, never a place for top-level imports.

transformers 5.x imports Hugging Face's `kernels` package; run from the checkout, `import kernels`
must not find our kernels/ folder (issue 32). thinkgate/__init__.py drops the checkout from
`sys.path` in every process that imports it; pytest runs in importlib mode so tests/ (which holds
api/, benchmarks/, ...) is not on the path either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ["kernels", "engine", "api", "parsers", "benchmarks", "tests"]

# What the tests, the server, its engine core and the benchmarks import.
THINKGATE_MODULES = [
    "thinkgate.kernels", "thinkgate.engine.core.llm_engine", "thinkgate.engine.process.engine_core",
    "thinkgate.parsers", "thinkgate.api.cli", "thinkgate.api.server.app",
    "thinkgate.api.batch.ray_runner", "thinkgate.benchmarks.real_vocab_model",
]

_PROBE = """
import importlib, importlib.util, json, multiprocessing, sys
for name in {modules!r}:
    importlib.import_module(name)
found = {{}}
for name in {top!r}:
    spec = importlib.util.find_spec(name)
    found[name] = spec.origin if spec else None
ours = {{n: sys.modules[n].__file__ for n in {modules!r}}}
with multiprocessing.get_context("spawn").Pool(1) as pool:  # as the engine core is started
    child = pool.apply(eval, ("__import__('importlib.util').util.find_spec('kernels')",))
print(json.dumps({{"found": found, "ours": ours,
                  "child": child.origin if child else None}}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    return {**env, **extra}


def _under_root(path: str | None) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(ROOT)


def _under_root_top(path: str | None) -> bool:
    """A module file in one of the checkout's top-level folders (kernels/__init__.py, ...)."""
    return path is not None and any(Path(path).resolve().is_relative_to(ROOT / name)
                                    for name in TOP_LEVEL)


def test_pytest_puts_neither_the_root_nor_tests_on_sys_path() -> None:
    import thinkgate  # noqa: F401  (the suite imports it everywhere; say so here too)

    resolved = {Path(p or os.curdir).resolve() for p in sys.path}
    assert ROOT not in resolved
    assert ROOT / "tests" not in resolved
    assert ROOT.parent not in resolved  # (the package would import twice, once under the checkout's name)
    for name in TOP_LEVEL:
        module = sys.modules.get(name)
        assert not _under_root_top(getattr(module, "__file__", None)), name


def _standins(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    for name in TOP_LEVEL:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"STANDIN = {name!r}\n")
    return site


def test_standin_packages_win_over_the_checkout_folders(tmp_path: Path) -> None:
    """From the checkout root (`python -c` puts it first on the path), with a third-party package
    named like each top-level folder: thinkgate's modules load from the checkout, `import kernels`
    (and the others) gets the third-party package, in this process and a spawned child."""
    code = _PROBE.format(modules=THINKGATE_MODULES, top=TOP_LEVEL)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env=_clean_env(PYTHONPATH=str(_standins(tmp_path))))
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    site = tmp_path / "site"
    for name in TOP_LEVEL:
        assert Path(report["found"][name]).resolve() == (site / name / "__init__.py").resolve(), \
            (name, report["found"][name])
    for name, path in report["ours"].items():
        assert _under_root(path), (name, path)
    assert Path(report["child"]).resolve() == (site / "kernels" / "__init__.py").resolve()


@pytest.mark.parametrize("how", ["-c", "-m"])
def test_transformers_models_import_from_the_checkout_root(how: str, tmp_path: Path) -> None:
    """The failure of issue 32: a transformers model class imported after thinkgate, in a process
    started from the checkout root (`python -m thinkgate...` as the READMEs show, or `-c`)."""
    code = ("import thinkgate.engine.model.model_loader, importlib.util\n"
            "from transformers import LlamaForCausalLM  # imports the hub's `kernels` if there\n"
            "spec = importlib.util.find_spec('kernels')\n"
            "print(spec.origin if spec else None)\n")
    if how == "-c":
        cmd = [sys.executable, "-c", code]
    else:
        (tmp_path / "probe_mod.py").write_text(code)
        cmd = [sys.executable, "-m", "probe_mod"]
    env = _clean_env(PYTHONPATH=str(tmp_path)) if how == "-m" else _clean_env()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    origin = out.stdout.strip().splitlines()[-1]
    assert origin == "None" or not _under_root_top(origin), origin


_RAY_PROBE = """
import importlib.util, json, sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

@ray.remote
def probe(root):
    import os, sys, importlib.util
    def on_path():
        return [p for p in sys.path if os.path.isdir(p) and os.path.samefile(p, root)]
    before = on_path()  # Ray puts the driver's folder on every worker's path
    import thinkgate.api.batch.ray_runner  # what a BatchReplica's worker imports first
    spec = importlib.util.find_spec("kernels")
    return {"before": before, "after": on_path(), "kernels": spec.origin if spec else None}

print(json.dumps(ray.get(probe.remote(sys.argv[1]))))
"""


def test_ray_workers_drop_the_checkout_root() -> None:
    pytest.importorskip("ray", reason="the `ray` extra is not installed")
    out = subprocess.run([sys.executable, "-c", _RAY_PROBE, str(ROOT)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=_clean_env())
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["before"], report  # the case this guards against is real
    assert report["after"] == [], report
    assert not _under_root_top(report["kernels"]), report


def test_no_test_package_takes_a_top_level_name() -> None:
    """In importlib mode a test folder with an `__init__.py` is imported under its own name
    (tests/api -> `api`), which would shadow a third-party package of that name in the test
    process; test files in folders without one are imported by their file name, so those names
    must be unique (pytest would hand back the first file's module for the second)."""
    tests = ROOT / "tests"
    packages = {p.parent.name for p in tests.rglob("__init__.py")}
    assert not packages & set(TOP_LEVEL), packages
    plain = [p for p in tests.rglob("*.py")
             if p.name != "conftest.py" and not (p.parent / "__init__.py").exists()
             and "templates" not in p.parts and "traces" not in p.parts]
    names = [p.name for p in plain]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
