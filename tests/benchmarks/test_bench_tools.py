"""A seeded slice of the BFCL dev tool sets through `bench_tools`' method, on the default backend
and the demo tokenizer (issue 36): for each tool format that writes calls, no invalid call may
get through the mask, the parser must read every written call back exactly (whole and in
deltas), and the ground-truth calls must be allowed.

data/bfcl_slice.jsonl.gz: 40 tool sets of ../shared/data/bfcl_dev.jsonl.gz
(`load_cases(dev, 40, seed=36)`), kept here so the test runs wherever the repository is cloned;
the tool sets come from the Berkeley Function Calling Leaderboard's public data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from thinkgate.benchmarks.bench_tools import FORMATS, Harness, load_cases, run_set

SLICE = Path(__file__).parent / "data" / "bfcl_slice.jsonl.gz"


@pytest.fixture(scope="module")
def harness() -> Harness:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    return Harness(tok, -(-len(tok) // 64) * 64, [0, 2], "auto")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_seeded_slice_of_bfcl_lets_no_invalid_call_through(harness: Harness, fmt: str) -> None:
    cases = load_cases(SLICE, None, seed=0)
    assert len(cases) == 40
    why: dict[str, str] = {}
    outcomes = {c["id"]: run_set(harness, fmt, c, [], [], why) for c in cases}
    counts = Counter(outcomes.values())
    bad = {k: v for k, v in outcomes.items() if v in ("invalid let through", "round trip")}
    assert not bad, (bad, why)
    assert counts["passing"] >= 39, (counts, why)
    # every tool set compiled on llguidance (milliseconds), none fell back to xgrammar
    assert harness.grammar.cache.compiled_by["xgrammar"] == 0


def test_round_trip_only_counts_every_set_of_each_format(capsys: pytest.CaptureFixture) -> None:
    from thinkgate.benchmarks.bench_tools import round_trips

    cases = load_cases(SLICE, None, 0)
    round_trips(["minimax_m3", "hermes"], cases)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| m")
            or line.startswith("| h")]
    assert rows == [f"| minimax_m3 | {len(cases)} | 0 | 0 |", f"| hermes | {len(cases)} | 0 | 0 |"]
