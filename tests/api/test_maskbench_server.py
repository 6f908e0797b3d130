"""Real-world schemas end to end (issue 31): 20 MaskBench schemas (the vendored dev-set slice)
sent at once as `response_format` to `thinkgate serve` with the official client at its defaults
(temperature 1); every answer validates against its schema (jsonschema), under `auto`. The
demo model is tiny: its free text runs on, so the requests ask for
`complete_before_max_tokens` (a cut answer would not parse)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
from thinkgate.benchmarks.bench_maskbench import load_cases

MODEL = "thinkgate-demo"
SLICE = Path(__file__).parents[1] / "benchmarks" / "data" / "maskbench_slice.jsonl.gz"


def _schemas() -> list[tuple[str, Any]]:
    from thinkgate.engine.sampling_params import StructuredOutputsParams
    from thinkgate.engine.structured.canonical import canonical_constraint

    picked = []
    for case in load_cases(SLICE, None, seed=0):
        schema = case["schema"]
        if not isinstance(schema, dict) or len(json.dumps(schema)) > 6000:
            continue
        try:
            canonical_constraint(StructuredOutputsParams(json=schema))
        except ValueError:
            continue
        picked.append((case["id"], schema))
        if len(picked) == 20:
            break
    return picked


SCHEMAS = _schemas()



def _ask(client: Any, schema: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL, max_tokens=128, messages=[{"role": "user", "content": "Fill it in."}],
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        extra_body={"chat_template_kwargs": {"enable_thinking": False},
                    "structured_outputs": {"complete_before_max_tokens": True}})


def test_twenty_real_schemas_all_validate(client: Any) -> None:
    assert len(SCHEMAS) == 20
    with ThreadPoolExecutor(20) as pool:
        outs = list(pool.map(lambda item: _ask(client, item[1]), SCHEMAS))
    failures = {}
    for (name, schema), out in zip(SCHEMAS, outs):
        text = out.choices[0].message.content
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as err:
            failures[name] = (out.choices[0].finish_reason, str(err)[:120], text[-80:])
    assert not failures, failures
