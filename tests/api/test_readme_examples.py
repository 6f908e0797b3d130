"""The README's first examples run as written and print what the README shows (issue 29).

A block the README marks `<!-- example: NAME -->` runs; the block marked
`<!-- example: NAME prints -->` right after it is what it must print. The Python examples run
in-process on the bundled demo model, the curl example against a real `thinkgate serve` (its
port swapped in); for curl the README shows the reply's `choices[0]`, and every field shown
there must match (ids are random, so an `id` is only checked to be present).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"<!-- example: (?P<name>[\w-]+)(?P<prints> prints)? -->\n```\w*\n"
                    r"(?P<body>.*?)\n```", re.S)


def _blocks() -> dict[tuple[str, bool], str]:
    return {(m["name"], bool(m["prints"])): m["body"] for m in _BLOCK.finditer(README.read_text())}


def _subset(shown: Any, got: Any, path: str = "") -> None:
    """Every field the README shows is in the reply with that value (ids: present)."""
    if isinstance(shown, dict):
        assert isinstance(got, dict), path
        for key, value in shown.items():
            assert key in got, f"{path}.{key} missing"
            if key != "id":
                _subset(value, got[key], f"{path}.{key}")
    elif isinstance(shown, list):
        assert isinstance(got, list) and len(got) == len(shown), path
        for i, (a, b) in enumerate(zip(shown, got)):
            _subset(a, b, f"{path}[{i}]")
    else:
        assert shown == got, f"{path}: README shows {shown!r}, the server said {got!r}"


def test_the_readme_marks_its_examples() -> None:
    blocks = _blocks()
    for name in ("python-api", "chat-tools", "curl"):
        assert (name, False) in blocks and (name, True) in blocks, name


@pytest.mark.slow  # each example builds its own LLM() (~10 s here): `make test-slow` runs them
@pytest.mark.parametrize("name", ["python-api", "chat-tools"])
def test_python_example_prints_what_the_readme_shows(name: str) -> None:
    blocks = _blocks()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[name, False], f"README:{name}", "exec"), {"__name__": "__readme__"})
    assert out.getvalue().rstrip("\n") == blocks[name, True]


def test_curl_example_answers_what_the_readme_shows(server: Any) -> None:
    blocks = _blocks()
    command = blocks["curl", False].replace("http://127.0.0.1:8000", server.base)
    reply = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                           check=True)
    _subset(json.loads(blocks["curl", True]), json.loads(reply.stdout)["choices"][0])
