"""The shared trace harness: one function checks one recorded trace every way.

A trace file is JSON: a list of groups `{"reasoning_parser", "tool_parser", "parsers",
"tokenizer", "cases"}` (`parsers` runs the same cases under several reasoning-parser names;
`tokenizer` is `{"chat_template": ...}` for template-driven formats, `{"vocab": {...}}` for
formats that read tokens from the vocabulary). A case is
`{"name", "text", "reasoning", "content", "tool_calls": [{"name", "arguments", "id"}], "comment",
"chat_template_kwargs", "tools", "allow_markers": [...], "note"}`; `arguments` is a JSON
object; a call's `id` is optional (the format's own id, checked when given); `note` says why a case departs from vLLM. Tool traces use the same keys with
`tool_parser` set in the group.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from thinkgate.parsers import Parser, collect, get_parser

TRACES = Path(__file__).parent / "traces"
CHUNKINGS = ("1", "2", "3", "7", "rand0", "rand1", "rand2")


class TemplateTokenizer:
    """Just enough of a HF tokenizer for formats read from the model's files (the chat
    template, `init_kwargs`, and `vocab`: tokens a format looks up, as Hunyuan 4's tag suffix)."""

    def __init__(self, chat_template: str = "", vocab: dict[str, int] | None = None,
                 **init_kwargs: Any) -> None:
        self.chat_template = chat_template
        self.init_kwargs = init_kwargs
        self._vocab = dict(vocab or {})

    def get_vocab(self) -> dict[str, int]:
        return self._vocab


def load_cases(subdir: str) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(test id, group settings, case) for every case under traces/<subdir>/."""
    for path in sorted((TRACES / subdir).glob("*.json")):
        for group in json.loads(path.read_text()):
            names = group.get("parsers") or [group.get("reasoning_parser")]
            for rname in names:
                settings = {**group, "reasoning_parser": rname}
                for case in group["cases"]:
                    tag = f"{path.stem}:{rname}+{group.get('tool_parser')}:{case['name']}"
                    yield tag, settings, case


def make_parser(settings: dict[str, Any]) -> Parser:
    tok = settings.get("tokenizer")
    tokenizer = TemplateTokenizer(**tok) if isinstance(tok, dict) else None
    return get_parser(tool_parser=settings.get("tool_parser"),
                      reasoning_parser=settings.get("reasoning_parser"), tokenizer=tokenizer)


def split(text: str, how: str) -> list[str]:
    if how.startswith("rand"):
        rng = random.Random(int(how[4:]))
        out, i = [], 0
        while i < len(text):
            n = rng.randint(1, 9)
            out.append(text[i:i + n])
            i += n
        return out
    n = int(how)
    return [text[i:i + n] for i in range(0, len(text), n)]


def stream(parser: Parser, case: dict[str, Any], chunks: list[str],
           tools: Any = None) -> list[dict[str, Any]]:
    s = parser.stream(tools=case.get("tools", tools),
                      chat_template_kwargs=case.get("chat_template_kwargs"))
    deltas: list[dict[str, Any]] = []
    for chunk in chunks:
        deltas += s.feed(chunk)
    return deltas + s.finish()


def summary(msg: Any, ids: list[str | None] | None = None) -> dict[str, Any]:
    """The message as a trace writes it; ``ids[i]`` set: call i's id is compared too."""
    calls = []
    for i, c in enumerate(msg.tool_calls):
        call = {"name": c.name, "arguments": json.loads(c.arguments)}
        if ids and i < len(ids) and ids[i] is not None:
            call["id"] = c.id
        calls.append(call)
    return {"reasoning": msg.reasoning, "content": msg.content, "tool_calls": calls}


def check_delta_shape(deltas: list[dict[str, Any]], empty_names: bool = False) -> None:
    """OpenAI chat-chunk deltas: non-empty text; a call's first delta has id/type/name (a name
    that may be "" only where the case expects a nameless call: vLLM's Mistral engine)."""
    seen: set[int] = set()
    for d in deltas:
        assert d and set(d) <= {"reasoning", "content", "tool_calls"}, d
        for key in ("reasoning", "content"):
            if key in d:
                assert isinstance(d[key], str) and d[key], d
        for tc in d.get("tool_calls", ()):
            idx = tc["index"]
            if idx not in seen:
                assert idx == len(seen), f"tool call index {idx} out of order"
                assert isinstance(tc["id"], str) and tc["id"], tc
                name = tc["function"]["name"]
                assert tc["type"] == "function" and isinstance(name, str), tc
                assert name or empty_names, tc
                seen.add(idx)
            else:
                assert "id" not in tc and "name" not in tc["function"], tc
                assert isinstance(tc["function"]["arguments"], str), tc


def check_case(settings: dict[str, Any], case: dict[str, Any],
               chunkings: tuple[str, ...] = CHUNKINGS, parser: Parser | None = None) -> None:
    """The case non-streamed and streamed in each chunking; a group's `tools` are the
    default for its cases."""
    parser = parser or make_parser(settings)
    tools = case.get("tools", settings.get("tools"))
    expected = {"reasoning": case.get("reasoning"), "content": case.get("content"),
                "tool_calls": case.get("tool_calls", [])}
    ids = [c.get("id") for c in expected["tool_calls"]]
    parsed = parser.parse(case["text"], tools=tools,
                          chat_template_kwargs=case.get("chat_template_kwargs"))
    assert summary(parsed, ids) == expected, f"non-streamed result {summary(parsed, ids)}"
    for how in chunkings:
        deltas = stream(parser, case, split(case["text"], how), tools)
        check_delta_shape(deltas, any(c.get("name") == "" for c in expected["tool_calls"]))
        assert summary(collect(deltas), ids) == expected, f"streamed in chunks {how}: {deltas}"
    allowed = set(case.get("allow_markers", ()))
    for marker in parser_markers(parser) - allowed:
        for key in ("reasoning", "content"):
            assert marker not in (expected[key] or ""), f"marker {marker!r} leaks into {key}"


def parser_markers(parser: Parser) -> set[str]:
    r, t = parser.reasoning, parser.tool
    out: set[str] = set()
    if r is not None:
        out |= {*r.start, *r.end, *r.implicit_end, *r.content_drop, *r.drop}
    if t is not None:
        out |= set(t.all_special_markers())
    return out
