"""The ported traces against vLLM 0.33's own parsers: which agree, which are listed, which not.

A developer tool, not part of `make test`; run it as `parser_diff_vllm` is run (vLLM 0.33 on
`PYTHONPATH`, see that file). Every case under `tests/parsers/traces/<folder>/` (default `vllm`)
is read by vLLM's `ParserManager` `parse` with the harness's stand-in tokenizer and the case's
tools (or, where the case has none, a tool list naming its expected calls), and compared with the
case's expectation (which `make test` holds ours to):

- exact: vLLM gives the expectation, and the case has no `note` (a case from one of vLLM's
  streaming tests, `streaming` in its name, is compared with vLLM's stream too);
- listed: the case has a `note` (a deliberate difference, a row of parsers/README.md) and vLLM
  gives something else;
- stale note: the case has a `note` but vLLM gives the expectation (the note can go);
- unlisted: vLLM gives something else and the case has no `note` (a port error, or vLLM's
  result depends on the real tokenizer).

    PYTHONPATH=<vLLM 0.33>:<folder holding thinkgate> python -m \\
        thinkgate.benchmarks.parser_check_traces [--folder vllm] [--show] [--only FILE ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from thinkgate.benchmarks.parser_diff_vllm import norm, vllm_parse, vllm_parse_streamed

TRACES = Path(__file__).resolve().parent.parent / "tests" / "parsers" / "traces"


def named_tools(case: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The case's tools (chat-completions shape), or one open-schema tool per expected call."""
    if case.get("tools"):
        return [t if "function" in t else {"type": "function", "function": {
            k: v for k, v in t.items() if k != "type"}} for t in case["tools"]]
    names = sorted({c["name"] for c in case.get("tool_calls") or [] if c.get("name")})
    return [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {}}}} for n in names] or None


def expected(case: dict[str, Any]) -> tuple:
    return norm(case.get("reasoning"), case.get("content"),
                [{"name": c["name"], "arguments": c["arguments"]}
                 for c in case.get("tool_calls") or []])


def vllm_result(tool: str | None, reasoning: str | None, case: dict[str, Any],
                streamed: bool = False, special: bool | None = None,
                vocab: tuple[str, ...] = ()) -> tuple | None:
    """vLLM's result for the case, non-streamed or (`streamed`) one token per delta; `vocab`:
    tokens the group's tokenizer adds (Hunyuan 4's suffixed tags)."""
    args = (tool, reasoning, case["text"], case.get("chat_template_kwargs") or {})
    kw = {"tools": named_tools(case) if tool else None, "special": special, "add": vocab,
          # a pre-v11 Mistral tokenizer has no `[ARGS]` token
          "drop": ("[ARGS]",) if case["name"].startswith("pre_v11") else ()}
    if streamed:
        return vllm_parse_streamed(*args, **kw)
    try:
        return vllm_parse(*args, **kw)
    except Exception as e:  # noqa: BLE001 - an exception is vLLM's result here
        return ("error", type(e).__name__, str(e)[:160])


def agrees(tool: str | None, rname: str | None, case: dict[str, Any],
           vocab: tuple[str, ...] = ()) -> tuple[bool, tuple]:
    """Whether vLLM gives the case's expectation (with the markers as plain text or as special
    tokens: the stand-in cannot know which the real vocabulary has), and its result."""
    want, got = expected(case), vllm_result(tool, rname, case, vocab=vocab)
    if want == got:
        return True, got
    if want == vllm_result(tool, rname, case, special=tool is not None, vocab=vocab):
        return True, got
    # a case from one of vLLM's streaming tests: its stream is the expectation
    return "streaming" in case["name"] and want == vllm_result(tool, rname, case, True,
                                                               vocab=vocab), got


def check_file(path: Path, seen: set[str]) -> dict[str, list]:
    """The cases of one trace file by kind; a case whose input repeats an earlier one (a
    streaming test of a non-streamed input) counts once, as "duplicate"."""
    out: dict[str, list] = {"exact": [], "listed": [], "stale note": [], "unlisted": [],
                            "skipped": [], "duplicate": []}
    for group in json.loads(path.read_text()):
        tok = group.get("tokenizer") or {}
        if tok.get("chat_template") is not None:  # template-driven formats (hf/beam)
            out["skipped"] += [(c["name"], None, None) for c in group["cases"]]
            continue
        vocab = tuple(tok.get("vocab") or ())
        for rname in group.get("parsers") or [group.get("reasoning_parser")]:
            tool = group.get("tool_parser")
            for case in group["cases"]:
                key = json.dumps([tool, rname, case["text"], case.get("chat_template_kwargs"),
                                  case.get("tools")], sort_keys=True)
                if key in seen:
                    out["duplicate"].append((case["name"], case, None))
                    continue
                seen.add(key)
                same, got = agrees(tool, rname, case, vocab)
                kind = ("stale note" if same else "listed") if "note" in case else (
                    "exact" if same else "unlisted")
                out[kind].append((f"{rname}+{tool}:{case['name']}", case, got))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default="vllm")
    ap.add_argument("--only", nargs="*", default=None, help="trace file stems")
    ap.add_argument("--show", action="store_true", help="print unlisted cases and stale notes")
    ap.add_argument("--show-listed", action="store_true", help="--show prints listed cases too")
    args = ap.parse_args()
    totals = dict.fromkeys(("exact", "listed", "stale note", "unlisted", "skipped",
                            "duplicate"), 0)
    seen: set[str] = set()
    stream_equal = 0
    print(f"{'trace file':34s} {'exact':>5s} {'listed':>6s} {'stale':>5s} {'unlisted':>8s}")
    for path in sorted((TRACES / args.folder).glob("*.json")):
        if args.only and path.stem not in args.only:
            continue
        res = check_file(path, seen)
        for k in totals:
            totals[k] += len(res[k])
        for tag, case, _ in res["listed"]:
            rname, tool = tag.split(":", 1)[0].split("+")
            got = vllm_result(None if tool == "None" else tool, None if rname == "None" else rname,
                              case, streamed=True)
            stream_equal += got == expected(case)
        print(f"{path.stem:34s} {len(res['exact']):5d} {len(res['listed']):6d}"
              f" {len(res['stale note']):5d} {len(res['unlisted']):8d}")
        if args.show:
            for kind in ("unlisted", "stale note", *(("listed",) if args.show_listed else ())):
                for tag, case, got in res[kind]:
                    print(f"  {kind}: {tag}\n    text {case['text']!r}\n"
                          f"    want {expected(case)}\n    vLLM {got}"
                          + (f"\n    note {case['note']}" if "note" in case else ""))
    n = sum(v for k, v in totals.items() if k not in ("skipped", "duplicate"))
    print(f"of the listed, ours equals vLLM's stream (one token per delta): {stream_equal}")
    print(f"cases {n} (+{totals['skipped']} skipped, {totals['duplicate']} duplicate): exact {totals['exact']}"
          f" ({100 * totals['exact'] / max(n, 1):.1f}%), exact or listed"
          f" {totals['exact'] + totals['listed']}"
          f" ({100 * (totals['exact'] + totals['listed']) / max(n, 1):.1f}%), stale notes"
          f" {totals['stale note']}, unlisted {totals['unlisted']}")


if __name__ == "__main__":
    main()
