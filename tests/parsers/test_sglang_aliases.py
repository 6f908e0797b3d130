"""SGLang's parser names that differ from vLLM's for the same format (parsers/aliases.py): one
trace per alias (traces/sglang/), read through the alias like any trace, and giving what the
vLLM name gives. The aliases stay out of `list_parsers()` (test_vllm_names.py compares those)."""

from __future__ import annotations

from typing import Any

import pytest
from parser_harness import check_case, load_cases, make_parser, summary
from thinkgate.parsers import list_parsers
from thinkgate.parsers.aliases import REASONING_ALIASES, TOOL_ALIASES

CASES = list(load_cases("sglang"))


@pytest.mark.parametrize(("settings", "case"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_alias_trace(settings: dict[str, Any], case: dict[str, Any]) -> None:
    check_case(settings, case)
    canonical = {**settings, ("tool_parser" if settings.get("tool_parser") else
                              "reasoning_parser"): settings["canonical"]}
    kw = {"tools": case.get("tools"), "chat_template_kwargs": case.get("chat_template_kwargs")}
    assert summary(make_parser(canonical).parse(case["text"], **kw)) == \
        summary(make_parser(settings).parse(case["text"], **kw))


def test_every_alias_has_a_trace_and_names_a_vllm_parser() -> None:
    names = list_parsers()
    traced = {(s.get("tool_parser"), s.get("reasoning_parser")) for _, s, _ in CASES}
    for alias, name in TOOL_ALIASES.items():
        assert name in names["tool"] and alias not in names["tool"]
        assert (alias, None) in traced
    for alias, name in REASONING_ALIASES.items():
        assert name in names["reasoning"] and alias not in names["reasoning"]
        assert (None, alias) in traced
