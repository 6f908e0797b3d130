"""A seeded slice of the MaskBench dev set through `bench_maskbench`'s method, on the default
backend and the demo tokenizer (issue 31): no instance that fails its schema may get through
the mask, nothing may crash, and most schemas pass.

data/maskbench_slice.jsonl.gz: 60 schemas of ../shared/data/maskbench_dev.jsonl.gz
(`load_cases(dev, 60, seed=31)`), kept here so the test runs wherever the repository is cloned;
MaskBench's data comes from the public guidance-ai/jsonschemabench repository."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from thinkgate.benchmarks.bench_maskbench import ThinkgateEngine, load_cases, run_schema

SLICE = Path(__file__).parent / "data" / "maskbench_slice.jsonl.gz"


@pytest.fixture(scope="module")
def engine_and_tokenizer() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    vocab = -(-len(tok) // 64) * 64
    return ThinkgateEngine(tok, vocab, [0, 2]), tok


def test_a_seeded_slice_of_maskbench_lets_no_invalid_instance_through(
        engine_and_tokenizer: Any) -> None:
    engine, tok = engine_and_tokenizer
    why: dict[str, str] = {}
    cases = load_cases(SLICE, None, seed=0)
    assert len(cases) == 60
    outcomes = {c["id"]: run_schema(engine, tok, c, [], [], why) for c in cases}
    counts = Counter(outcomes.values())
    bad = {k: v for k, v in outcomes.items() if v in ("invalidation error", "crash")}
    assert not bad, bad
    assert counts["passing"] >= 0.85 * len(cases), (counts, why)
