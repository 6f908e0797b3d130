"""Every reasoning trace: non-streamed, streamed at every chunking, no leaks, delta shape."""

from __future__ import annotations

from typing import Any

import pytest
from parser_harness import check_case, load_cases
from thinkgate.parsers.reasoning import REASONING_MODULES

CASES = list(load_cases("reasoning"))


@pytest.mark.parametrize(("settings", "case"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trace(settings: dict[str, Any], case: dict[str, Any]) -> None:
    check_case(settings, case)


def test_every_reasoning_parser_has_traces() -> None:
    covered = {settings["reasoning_parser"] for _, settings, _ in CASES}
    missing = set(REASONING_MODULES) - covered
    assert not missing, f"reasoning parsers without traces: {sorted(missing)}"
    assert len(REASONING_MODULES) == 42
