"""The differential fuzz's outputs as traces (traces/fuzz/, written by
`parser_diff_vllm --fuzz N --write-fuzz`): well-formed and corrupted outputs per format on which
ours agrees with vLLM 0.33's parse, or differs by a listed deliberate difference (`note`).

Each name's cases run in one test: non-streamed, one character per delta and random chunks
(the full chunking matrix runs on the ported and hand-written traces), so the few thousand
cases stay a few seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from parser_harness import TRACES, check_case, make_parser

GROUPS = [g for path in sorted((TRACES / "fuzz").glob("*.json"))
          for g in json.loads(path.read_text())]


@pytest.mark.parametrize("group", GROUPS,
                         ids=[f"{g['tool_parser']}+{g['reasoning_parser']}" for g in GROUPS])
def test_fuzz_group(group: dict[str, Any]) -> None:
    parser = make_parser(group)
    for case in group["cases"]:
        try:
            check_case(group, case, chunkings=("1", "rand1"), parser=parser)
        except AssertionError as e:
            raise AssertionError(f"{case['name']}: {case['text']!r}: {e}") from None


def test_the_fuzz_covers_every_name() -> None:
    # vLLM 0.33's names (plugins other tests register are not in the fuzz)
    from test_vllm_names import VLLM_033_REASONING_PARSERS, VLLM_033_TOOL_PARSERS

    tools = {g["tool_parser"] for g in GROUPS if g["tool_parser"]}
    reasoning = {g["reasoning_parser"] for g in GROUPS if not g["tool_parser"]}
    assert set(VLLM_033_TOOL_PARSERS) - {"hf", "beam"} <= tools
    assert set(VLLM_033_REASONING_PARSERS) - {"hf", "beam"} <= reasoning
    assert sum(len(g["cases"]) for g in GROUPS) >= 1500
