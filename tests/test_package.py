"""The package itself: a light import, the layout, and a clean lint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_thinkgate_stays_light():
    code = ("import sys, thinkgate; heavy = [m for m in ('torch', 'triton', 'fastapi', "
            "'transformers', 'xgrammar') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""


def test_layout_has_each_package_with_a_readme():
    for name in ["kernels", "engine", "parsers", "api", "benchmarks"]:
        assert (ROOT / name / "__init__.py").is_file(), name
        assert (ROOT / name / "README.md").is_file(), name
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    out = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:]


def test_every_package_folder_is_declared_for_the_wheel():
    """pyproject lists the packages by hand (the checkout root is the package): a folder with an
    `__init__.py` that is not listed would be missing from a non-editable install."""
    import tomllib

    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                   ["packages"])
    skip = {"tests", ".venv", ".venv-latest", "build"}
    found = {"thinkgate"} | {
        "thinkgate." + ".".join(init.parent.relative_to(ROOT).parts)
        for init in ROOT.rglob("__init__.py")
        if init.parent != ROOT and not skip & set(init.relative_to(ROOT).parts) and not any(
            part.startswith(".") or part.endswith(".egg-info")
            for part in init.relative_to(ROOT).parts)}
    assert found - declared == set(), sorted(found - declared)
