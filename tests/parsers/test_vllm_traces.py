"""vLLM 0.33's own parser test cases, ported as traces (traces/vllm/, one file per vLLM test file).

Each case runs like every other trace: non-streamed, streamed in several chunkings, no marker
leaks. A case whose `note` says vLLM differs expects our result; parsers/README.md lists why.
"""

from __future__ import annotations

from typing import Any

import pytest
from parser_harness import check_case, load_cases

CASES = list(load_cases("vllm"))


@pytest.mark.parametrize(("settings", "case"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_vllm_case(settings: dict[str, Any], case: dict[str, Any]) -> None:
    check_case(settings, case)


def test_every_ported_group_names_its_source() -> None:
    sources = {settings.get("source") for _, settings, _ in CASES}
    assert sources and all(s and s.startswith("vllm 0.33 tests/") for s in sources), sources
