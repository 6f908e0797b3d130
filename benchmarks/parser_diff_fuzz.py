"""`parser_diff_vllm --fuzz N`: well-formed and corrupted outputs per format, and their traces.

A fuzz output starts from `parser_diff_gen.generate`'s (reasoning, text, 0-3 calls with nested
JSON, unicode and escaped quotes) and, seeded, may first get text between its calls (each call
in its own section), then one corruption: cut off at a position drawn over the whole output (so
every position is reachable), a character dropped, a span repeated (a marker written twice), a
character that breaks a format inserted (`{`, `"`, `<`, `]`, `\\`, `</`, a newline), or a run
of text inside a call replaced by a quote. The N outputs are spread over every tool and
reasoning name in turn.

With `--write-fuzz`, each output on which the two parsers agree, or differ by a listed
deliberate difference, becomes a trace under `tests/parsers/traces/fuzz/` (one file per kind,
one group per name; the expectation is ours, which equals vLLM 0.33's where they agree, and
carries the README row as `note` where it is listed). `test_fuzz_traces.py` runs them every
way; an unlisted disagreement is printed and not written.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from thinkgate.benchmarks.parser_diff_formats import CALL_FRAME, CALLS_ONLY, HARMONY, MAX_CALLS

FUZZ_DIR = Path(__file__).resolve().parent.parent / "tests" / "parsers" / "traces" / "fuzz"
BREAKERS = ["{", '"', "<", "]", "\\", "</", "\n", "}", "[", ">"]
BETWEEN = [" and then ", "\nNext:\n", " ", "; "]


def _with_text_between(tool: str, text: str, rng: random.Random) -> str:
    """The generated calls rewritten one section each, with text between them."""
    from thinkgate.benchmarks.parser_diff_gen import random_calls
    from thinkgate.parsers.tools.grammar import render_calls

    calls = random_calls(rng, MAX_CALLS.get(tool, 3))
    if len(calls) < 2:
        return text
    joined = rng.choice(BETWEEN).join(render_calls(tool, [c]) for c in calls)
    return rng.choice(["", "Sure. ", "Let me look.\n"]) + joined


def corrupt(text: str, rng: random.Random) -> tuple[str, str]:
    """One seeded corruption of `text` (or none), and its name."""
    if len(text) < 4:
        return text, "none"
    roll = rng.random()
    i = rng.randrange(len(text))
    if roll < 0.3:
        return text, "none"
    if roll < 0.55:
        return text[:i], "cut"
    if roll < 0.65:
        return text[:i] + text[i + 1:], "drop"
    if roll < 0.75:
        j = min(len(text), i + rng.randint(1, 24))
        return text[:j] + text[i:j] + text[j:], "repeat"
    if roll < 0.9:
        return text[:i] + rng.choice(BREAKERS) + text[i:], "insert"
    j = min(len(text), i + rng.randint(1, 8))
    return text[:i] + rng.choice(['"', "'"]) + text[j:], "replace"


def fuzz_output(tool: str | None, reasoning: str | None, seed: int) -> tuple[str, dict, str]:
    """One fuzz output for the name, its chat_template_kwargs and the corruption applied."""
    from thinkgate.benchmarks.parser_diff_gen import generate

    text, ckw = generate(tool, reasoning, 10_000 + seed)
    rng = random.Random(f"fuzz/{tool}/{reasoning}/{seed}")
    name = tool or ""
    # calls in their own sections with text between (not where calls are channel messages,
    # the whole message, or one per output)
    if tool and name not in HARMONY and name not in CALLS_ONLY and name not in CALL_FRAME \
            and MAX_CALLS.get(name, 3) > 1 and rng.random() < 0.3:
        text = _with_text_between(tool, text, rng)
    text, how = corrupt(text, rng)
    return text, ckw, how


def fuzz_plan(pairs: list[tuple[str | None, str | None]], n: int) -> list[tuple[Any, Any, int]]:
    """N (tool, reasoning, seed) spread over the names in turn."""
    return [(*pairs[k % len(pairs)], k // len(pairs)) for k in range(n)]


def trace_case(tool: str | None, reasoning: str | None, seed: int, how: str, text: str,
               ckw: dict, tools: list[dict], label: str | None) -> dict[str, Any]:
    """Our result for the output as a trace case (ours == vLLM's, or a listed difference)."""
    from thinkgate.benchmarks.parser_diff_formats import PAIRED_REASONING
    from thinkgate.parsers import get_parser
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning or PAIRED_REASONING.get(tool or ""))
    m = p.parse(text, tools=tools if tool else None, chat_template_kwargs=ckw)
    case: dict[str, Any] = {"name": f"{seed}_{how}", "text": text, "reasoning": m.reasoning,
                            "content": m.content, "tool_calls": [
                                {"name": c.name, "arguments": json.loads(c.arguments)}
                                for c in m.tool_calls]}
    if ckw:
        case["chat_template_kwargs"] = ckw
    if label:
        case["note"] = f"listed: {label} (parsers/README.md)"
    markers = _markers(p)
    leaked = sorted(mk for mk in markers if mk in (m.reasoning or "") or mk in (m.content or ""))
    if leaked:
        case["allow_markers"] = leaked
    return case


def _markers(p: Any) -> set[str]:
    out: set[str] = set()
    if p.reasoning is not None:
        r = p.reasoning
        out |= {*r.start, *r.end, *r.implicit_end, *r.content_drop, *r.drop}
    if p.tool is not None:
        out |= set(p.tool.all_special_markers())
    return out


def write_traces(cases: dict[tuple[Any, Any], list[dict[str, Any]]],
                 tools: list[dict]) -> None:
    """tests/parsers/traces/fuzz/{tool,reasoning}.json, one group per name."""
    from thinkgate.benchmarks.parser_diff_formats import PAIRED_REASONING

    FUZZ_DIR.mkdir(parents=True, exist_ok=True)
    for kind in ("tool", "reasoning"):
        groups = []
        for (tool, reasoning), group_cases in cases.items():
            if (kind == "tool") != (tool is not None) or not group_cases:
                continue
            groups.append({"tool_parser": tool,
                           "reasoning_parser": reasoning or PAIRED_REASONING.get(tool or ""),
                           "source": "vllm 0.33 parse (parser_diff_vllm --fuzz)",
                           "tools": tools if tool else None, "cases": group_cases})
        (FUZZ_DIR / f"{kind}.json").write_text(
            json.dumps(groups, ensure_ascii=False, indent=0) + "\n")
