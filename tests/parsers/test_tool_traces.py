"""Every tool-format trace: non-streamed, streamed at every chunking, no leaks, delta shape."""

from __future__ import annotations

from typing import Any

import pytest
from parser_harness import check_case, load_cases
from thinkgate.parsers import list_parsers
from thinkgate.parsers.tools import TOOL_MODULES

CASES = list(load_cases("tools"))


@pytest.mark.parametrize(("settings", "case"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trace(settings: dict[str, Any], case: dict[str, Any]) -> None:
    check_case(settings, case)


def test_every_tool_parser_has_traces() -> None:
    covered = {settings["tool_parser"] for _, settings, _ in CASES}
    missing = set(TOOL_MODULES) - covered  # the built-in names (plugins may add more)
    assert not missing, f"tool parsers without traces: {sorted(missing)}"
    assert len(TOOL_MODULES) == 58
    assert set(TOOL_MODULES) <= set(list_parsers()["tool"])
