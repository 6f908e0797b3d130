"""Imports run one way. Every module's imports are read from its source (ast: top-level, inside
functions, under TYPE_CHECKING) and checked against the directions the READMEs document:

- between packages: benchmarks -> api -> engine -> parsers, kernels (parsers and kernels import
  neither each other nor anything above them; parsers never import torch);
- inside engine/ (engine/README.md): the root's shared types import no room; each room imports
  only the rooms its row allows; the public `engine.async_engine` sits above them all;
- inside kernels/ (kernels/README.md): `cpu/` imports the kernel files, never the dispatcher
  (`sampler.py`, `__init__.py`), and no kernel file imports `cpu/`;
- inside api/ (api/README.md): the chat layer imports no room and no command-line module; the
  dialect rooms import only the chat layer and themselves;

and no module reaches itself through its imports (no circle anywhere in the package). The
checker is tested on a small tree of its own and on the real graph with one bad edge added.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"tests", "docs", "build", "__pycache__"}

PACKAGE_RANK = {"benchmarks": 3, "api": 2, "engine": 1, "parsers": 0, "kernels": 0}
FORBIDDEN_THIRD_PARTY = {"parsers": {"torch", "triton"}}

ENGINE_SHARED = {"config", "sampling_params", "outputs", "sequence", "errors"}
ENGINE_TOP = {"async_engine"}  # public paths above every room
ENGINE_ROOMS = {  # room -> the rooms it may import (besides the shared types)
    "process": {"core", "model", "structured"},
    "core": {"model", "kv", "structured"},
    "model": {"kv", "demo"},
    "kv": set(),
    "structured": set(),
    "demo": set(),
}

KERNELS_ABOVE_CPU = {"thinkgate.kernels", "thinkgate.kernels.sampler"}

API_CHAT_LAYER = {"chat", "errors", "generation", "llm", "logprobs", "metrics", "prompt_tokens",
                  "protocol", "sampling", "token_trace"}
API_COMMAND_LINE = {"cli", "cli_args", "chat_cli", "launch"}
API_DIALECTS = {"anthropic", "responses"}
API_ROOMS = API_DIALECTS | {"server", "batch", "ray_serve", "static"}


def read_imports(root: Path, package: str = "thinkgate") -> dict[str, set[str]]:
    """Module -> the modules it imports (ours, resolved; third-party by their top name)."""
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p in SKIP_DIRS or p.startswith(".") for p in parts[:-1]):
            continue
        names = [package, *parts[:-1]]
        if parts[-1] != "__init__.py":
            names.append(parts[-1][:-3])
        files[".".join(names)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(_ours(alias.name, files) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in files else _ours(base, files))
        graph[name] = found - {name}
    return graph


def _ours(module: str, files: dict[str, Path]) -> str:
    """Our deepest module along a dotted name, or the third-party top-level name."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in files:
            return ".".join(parts[:end])
    return parts[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import against the documented directions, as 'a -> b: why'."""
    bad = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            why = _why_not(source, target)
            if why:
                bad.append(f"{source} -> {target}: {why}")
    return bad


def _why_not(source: str, target: str) -> str | None:
    src, dst = source.split("."), target.split(".")
    src_pkg = src[1] if len(src) > 1 else None
    if dst[0] != "thinkgate":
        if target in FORBIDDEN_THIRD_PARTY.get(src_pkg or "", ()):
            return f"{src_pkg} never imports {target}"
        return None
    dst_pkg = dst[1] if len(dst) > 1 else None
    if src_pkg is None or dst_pkg is None:
        return None  # thinkgate/__init__.py names its exports lazily, by strings
    if src_pkg != dst_pkg:
        if src_pkg not in PACKAGE_RANK or dst_pkg not in PACKAGE_RANK:
            return f"unknown package {src_pkg if src_pkg not in PACKAGE_RANK else dst_pkg}"
        if PACKAGE_RANK[dst_pkg] >= PACKAGE_RANK[src_pkg]:
            return "packages import downwards only: benchmarks -> api -> engine -> parsers, kernels"
        return None
    rule = {"engine": _engine_rule, "kernels": _kernels_rule, "api": _api_rule}.get(src_pkg)
    return rule(src[2:], dst[2:], source, target) if rule else None


def _engine_rule(src: list[str], dst: list[str], source: str, target: str) -> str | None:
    def place(parts: list[str]) -> str:
        if not parts:
            return "shared"  # engine/__init__.py
        if parts[0] in ENGINE_ROOMS:
            return parts[0]
        if len(parts) == 1 and parts[0] in ENGINE_SHARED:
            return "shared"
        if len(parts) == 1 and parts[0] in ENGINE_TOP:
            return "top"
        return "?"

    a, b = place(src), place(dst)
    if "?" in (a, b):
        return "not in engine/README.md's map (a shared type, the top, or a room)"
    if a == b or a == "top" or b == "shared":
        return None
    if b == "top" or a == "shared":
        return "the shared types import no room, and nothing imports the public top"
    if b not in ENGINE_ROOMS[a]:
        return f"engine/{a} may import only {sorted(ENGINE_ROOMS[a]) or 'no room'}"
    return None


def _kernels_rule(src: list[str], dst: list[str], source: str, target: str) -> str | None:
    in_cpu, to_cpu = src[:1] == ["cpu"], dst[:1] == ["cpu"]
    if in_cpu and target in KERNELS_ABOVE_CPU:
        return "kernels/cpu imports the kernel files, never the dispatcher"
    if to_cpu and not in_cpu and source not in KERNELS_ABOVE_CPU:
        return "only the dispatcher (sampler.py) reaches into kernels/cpu"
    return None


def _api_rule(src: list[str], dst: list[str], source: str, target: str) -> str | None:
    def place(parts: list[str]) -> str:
        if not parts:
            return "chat"  # api/__init__.py
        if parts[0] in API_ROOMS:
            return parts[0]
        if len(parts) == 1 and parts[0] in API_CHAT_LAYER:
            return "chat"
        if len(parts) == 1 and parts[0] in API_COMMAND_LINE:
            return "command line"
        return "?"

    a, b = place(src), place(dst)
    if "?" in (a, b):
        return "not in api/README.md's map (the chat layer, the command line, or a room)"
    if a == "chat" and b != "chat":
        return "the chat layer imports no room and no command-line module"
    if a in API_DIALECTS and b not in ("chat", a):
        return "a dialect room imports only the chat layer and itself"
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return read_imports(ROOT)


def test_the_reader_sees_every_package_and_room(graph: dict[str, set[str]]) -> None:
    for name in ("thinkgate.kernels.cpu.sample", "thinkgate.engine.core.llm_engine",
                 "thinkgate.engine.kv.kv_cache", "thinkgate.engine.model.model_runner",
                 "thinkgate.engine.process.engine_core", "thinkgate.engine.structured.grammar",
                 "thinkgate.api.responses.turn", "thinkgate.benchmarks.bench_constrained",
                 "thinkgate.parsers"):
        assert name in graph, name
    assert "thinkgate.engine.core.scheduler" in graph["thinkgate.engine.core.llm_engine"]
    assert not any(name.startswith("thinkgate.tests") for name in graph)


def test_no_import_circle_anywhere(graph: dict[str, set[str]]) -> None:
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_imports_follow_the_documented_directions(graph: dict[str, set[str]]) -> None:
    assert violations(graph) == []


@pytest.mark.parametrize(("source", "target"), [
    ("thinkgate.kernels.bitmask", "thinkgate.engine.sequence"),  # kernels -> engine
    ("thinkgate.parsers", "thinkgate.api.chat"),  # parsers -> api
    ("thinkgate.engine.core.scheduler", "thinkgate.api.errors"),  # engine -> api
    ("thinkgate.api.llm", "thinkgate.benchmarks.bench_engine"),  # api -> benchmarks
    ("thinkgate.engine.kv.block_manager", "thinkgate.engine.core.scheduler"),  # kv -> core
    ("thinkgate.engine.model.model_runner", "thinkgate.engine.core.scheduler"),  # model -> core
    ("thinkgate.engine.structured.grammar", "thinkgate.engine.core.sampler"),
    ("thinkgate.engine.core.llm_engine", "thinkgate.engine.process.engine_core"),
    ("thinkgate.engine.sequence", "thinkgate.engine.core.detokenizer"),  # shared -> a room
    ("thinkgate.engine.kv.kv_cache", "thinkgate.engine.async_engine"),  # a room -> the top
    ("thinkgate.kernels.cpu.sample_rows", "thinkgate.kernels.sampler"),  # cpu -> dispatcher
    ("thinkgate.kernels.sampling", "thinkgate.kernels.cpu.sample"),  # a kernel -> cpu
    ("thinkgate.api.chat", "thinkgate.api.server.state"),  # chat layer -> a room
    ("thinkgate.api.responses.turn", "thinkgate.api.server.helpers"),  # dialect -> server
    ("thinkgate.parsers", "torch"),
])
def test_an_import_against_the_direction_fails(graph: dict[str, set[str]], source: str,
                                               target: str) -> None:
    assert source in graph and (target in graph or "." not in target)
    assert violations(graph) == []
    bad = {**graph, source: graph[source] | {target}}
    assert [v for v in violations(bad) if v.startswith(f"{source} -> {target}:")]


def test_an_added_edge_that_closes_a_circle_is_found(graph: dict[str, set[str]]) -> None:
    # llm_engine imports the scheduler, which imports the block manager
    bad = {**graph, "thinkgate.engine.kv.block_manager":
           graph["thinkgate.engine.kv.block_manager"] | {"thinkgate.engine.core.llm_engine"}}
    cycle = find_cycle(bad)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"thinkgate.engine.kv.block_manager", "thinkgate.engine.core.llm_engine"} <= set(cycle)


def test_the_checker_reads_lazy_relative_and_type_only_imports(tmp_path: Path) -> None:
    """A tree of its own: an import inside a function, one under TYPE_CHECKING and a relative
    one are all read; a circle through them and a room importing upwards both fail."""
    files = {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/sequence.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from thinkgate.engine.core.detokenizer import D\n",
        "engine/core/__init__.py": "",
        "engine/core/detokenizer.py": "from ..sequence import Sequence\n",
        "engine/kv/__init__.py": "",
        "engine/kv/cache.py": "def f():\n    from thinkgate.engine.core import detokenizer\n",
        "kernels/__init__.py": "",
        "kernels/bitmask.py": "import numpy\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = read_imports(tmp_path)
    assert graph["thinkgate.engine.kv.cache"] == {"thinkgate.engine.core.detokenizer"}
    assert graph["thinkgate.engine.core.detokenizer"] == {"thinkgate.engine.sequence"}
    assert graph["thinkgate.kernels.bitmask"] == {"numpy"}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"thinkgate.engine.sequence",
                                                "thinkgate.engine.core.detokenizer"}
    found = violations(graph)
    assert any(v.startswith("thinkgate.engine.kv.cache -> thinkgate.engine.core.detokenizer")
               for v in found), found
    assert any(v.startswith("thinkgate.engine.sequence -> ") for v in found), found


def test_every_engine_room_is_mapped_and_has_a_readme() -> None:
    folders = {p.name for p in (ROOT / "engine").iterdir()
               if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(ENGINE_ROOMS)
    for room in ENGINE_ROOMS:
        text = (ROOT / "engine" / room / "README.md").read_text()
        assert "| file | responsibility |" in text, room
        assert f"`{room}/`" in (ROOT / "engine" / "README.md").read_text(), room


def test_the_config_knows_the_structured_rooms_backends() -> None:
    """config.py checks the backend name without importing the room; the two lists agree."""
    from thinkgate.engine.config import STRUCTURED_OUTPUTS_BACKENDS
    from thinkgate.engine.structured.backend import BACKENDS

    assert STRUCTURED_OUTPUTS_BACKENDS == BACKENDS
