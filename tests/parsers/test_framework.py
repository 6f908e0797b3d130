"""The framework: registry, plugins, qwen3+hermes end to end, token ids, engine helpers."""

from __future__ import annotations

import json

import pytest
from fake_tokenizer import CharTokenizer
from parser_harness import check_delta_shape, split
from thinkgate.parsers import (
    collect,
    get_parser,
    get_reasoning_format,
    list_parsers,
    load_plugin,
)
from thinkgate.parsers.markers import MarkerSet
from thinkgate.parsers.reasoning import REASONING_MODULES

QWEN = "<think>\nNeed weather.\n</think>\n\n<tool_call>\n" \
       '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'


def run(parser, text: str, how: str = "1", **kw) -> list[dict]:
    s = parser.stream(**kw)
    out = []
    for chunk in split(text, how):
        out += s.feed(chunk)
    return out + s.finish()


def test_every_name_resolves() -> None:
    names = list_parsers()
    assert len(REASONING_MODULES) == 42 and set(REASONING_MODULES) <= set(names["reasoning"])
    tok = CharTokenizer(["<think>", "</think>"])
    for name in names["reasoning"]:
        assert get_parser(reasoning_parser=name, tokenizer=tok).reasoning is not None
    for name in names["tool"]:
        assert get_parser(tool_parser=name, tokenizer=tok).tool is not None


@pytest.mark.parametrize("kind", ["tool_parser", "reasoning_parser"])
def test_unknown_name_lists_known(kind: str) -> None:
    with pytest.raises(ValueError, match=r"unknown .* 'nope'; known: .*hermes|qwen3"):
        get_parser(**{kind: "nope"})


@pytest.mark.parametrize("name", ["hf", "beam"])
def test_template_names_resolve_without_a_tokenizer(name: str) -> None:
    """As vLLM resolves them before a tokenizer is loaded; the model writes its `<think>` tags."""
    m = get_parser(reasoning_parser=name, tool_parser=name).parse("<think>r</think>c")
    assert (m.reasoning, m.content) == ("r", "c")


def test_plugin_registers_new_names(tmp_path) -> None:
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(
        "from thinkgate.parsers import ReasoningFormat, register_reasoning_parser\n"
        "from thinkgate.parsers import register_tool_parser\n"
        "from thinkgate.parsers.tools.spec import Region, ToolSpec\n"
        "from thinkgate.parsers.tools.tool_format import SpecToolFormat\n"
        "register_reasoning_parser('my_reason')(ReasoningFormat('my_reason', start=('<r>',),"
        " end=('</r>',), prefilled=False))\n"
        "register_tool_parser('my_tools')(SpecToolFormat(ToolSpec('my_tools', (Region(('<c>',),"
        " 'json_call', end=('</c>',)),))))\n")
    assert load_plugin(plugin) == ["reasoning:my_reason", "tool:my_tools"]
    assert "my_reason" in list_parsers()["reasoning"]
    m = get_parser("my_tools", "my_reason").parse("<r>x</r>y")
    assert (m.reasoning, m.content) == ("x", "y")
    m = get_parser("my_tools").parse('<c>{"name": "f", "arguments": {}}</c>')
    assert [c.name for c in m.tool_calls] == ["f"]
    with pytest.raises(ValueError, match="not a file"):
        load_plugin(tmp_path / "missing.py")


@pytest.mark.parametrize("how", ["1", "2", "3", "7", "rand0", "rand5"])
def test_qwen3_hermes_end_to_end(how: str) -> None:
    p = get_parser(tool_parser="hermes", reasoning_parser="qwen3")
    deltas = run(p, QWEN, how)
    check_delta_shape(deltas)
    m = collect(deltas)
    # vLLM's qwen3 keeps the reasoning as written (strip_trailing_reasoning_whitespace off)
    assert m.reasoning == "\nNeed weather.\n" and m.content is None
    assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"})]
    assert m.tool_calls[0].id.startswith("chatcmpl-tool-") and len(m.tool_calls[0].id) == 30


def test_hermes_parallel_calls_content_and_finish_state() -> None:
    p = get_parser(tool_parser="hermes", reasoning_parser="qwen3")
    text = ("r</think>Sure.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
            "<tool_call>{\"name\": \"b\", \"parameters\": {\"x\": [1, \"</tool\"]}}</tool_call>")
    s = p.stream()
    deltas = s.feed(text) + s.finish()
    check_delta_shape(deltas)
    m = collect(deltas)
    assert m.content == "Sure.\n"  # vLLM's hermes keeps the text before the first call as written
    assert [c.name for c in m.tool_calls] == ["a", "b"]
    assert json.loads(m.tool_calls[1].arguments) == {"x": [1, "</tool"]}
    assert s.num_completed_calls == 2


def test_hermes_malformed_and_truncated() -> None:
    p = get_parser(tool_parser="hermes")
    bad = "<tool_call>{not json}</tool_call>"
    assert p.parse(bad).content == bad and p.parse(bad).tool_calls == []
    unclosed = '<tool_call>{"name": "f", "arguments": {"a": 1}}'
    s = p.stream()
    m = collect(s.feed(unclosed) + s.finish())
    assert [(c.name, c.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]
    assert s.num_completed_calls == 1  # the body is complete; only </tool_call> is missing
    # cut off mid-call: the call was already streamed; its arguments are closed, not counted
    s = p.stream()
    m = collect(s.feed('<tool_call>{"name": "f", "arguments": {"a": "Par') + s.finish())
    assert m.content is None and [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
        ("f", {"a": "Par"})]
    assert s.num_completed_calls == 0


@pytest.mark.parametrize("tool_parser", ["hermes", "qwen3_json"])
def test_qwen3_hermes_arguments_stream_as_written(tool_parser: str) -> None:
    """The demo model's format: arguments arrive while the model writes them, not at the end."""
    text = ('<think>\n...\n</think>\n\n<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    s = get_parser(tool_parser=tool_parser, reasoning_parser="qwen3").stream()
    per_char = [s.feed(ch) for ch in text]
    deltas = [d for out in per_char for d in out] + s.finish()
    check_delta_shape(deltas)
    m = collect(deltas)
    assert (m.reasoning, m.content) == ("\n...\n", None)
    assert [(c.name, c.arguments) for c in m.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')]
    args_at = [i for i, out in enumerate(per_char)
               for d in out for tc in d.get("tool_calls", ()) if tc["function"].get("arguments")]
    assert len(args_at) >= len('{"city": "Paris"}') - 1  # about one delta per character
    assert args_at[0] < text.index('"Paris"') < text.index("</tool_call>")
    assert s.num_completed_calls == 1


def test_tool_start_ends_reasoning_implicitly() -> None:
    p = get_parser(tool_parser="hermes", reasoning_parser="deepseek_r1")
    m = p.parse('thinking <tool_call>{"name": "f", "arguments": {}}</tool_call> after')
    assert (m.reasoning, m.content, m.tool_calls[0].name) == ("thinking ", "after", "f")


def test_marker_prefix_of_longer_marker_waits() -> None:
    short, long = "<|start|>assistant", "<|start|>assistant to=self<|message|>"
    ms = MarkerSet([short, long])
    assert ms.next_marker("x" + short) is None
    assert ms.holdback("x" + short) == len(short)
    assert ms.next_marker("x" + short, final=True) == (1, 1 + len(short), short)
    assert ms.next_marker("x" + short + "\n") == (1, 1 + len(short), short)
    assert ms.next_marker("x" + long) == (1, 1 + len(long), long)
    assert ms.holdback("abc<|sta") == 5 and ms.holdback("abc") == 0


def test_held_text_stays_bounded() -> None:
    p = get_parser(tool_parser="hermes", reasoning_parser="qwen3")
    s = p.stream()
    for _ in range(2000):
        s.feed("word <thin")
        s.feed("king> ")
        assert len(s._buf) <= len("<tool_call>")


def test_skipped_special_tokens_are_restored_from_ids() -> None:
    tok = CharTokenizer(["[THINK]", "[/THINK]", "[TOOL_CALLS]"])
    p = get_parser(reasoning_parser="mistral", tokenizer=tok)
    text = "[THINK]Add.[/THINK]Four"
    s = p.stream()
    deltas = []
    for tid in tok.encode(text):  # one token per delta, specials decoded as ""
        deltas += s.feed(tok.decode([tid], skip_special_tokens=True), token_ids=[tid])
    m = collect(deltas + s.finish())
    assert (m.reasoning, m.content) == ("Add.", "Four")
    ids = tok.encode(text)  # one delta holding everything, specials skipped
    m2 = p.parse(tok.decode(ids, skip_special_tokens=True), token_ids=ids)
    assert (m2.reasoning, m2.content) == ("Add.", "Four")


def test_engine_helpers() -> None:
    tok = CharTokenizer(["<think>", "</think>", "<|im_start|>", "<|im_end|>"])
    fmt = get_reasoning_format("qwen3")
    assert fmt.end_token_ids(tok) == [2] and fmt.start_token_ids(tok) == [1]
    on = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    off = tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    history = tok.encode("<|im_start|>assistant\n<think>x</think>y<|im_end|><|im_start|>assistant\n")
    assert not fmt.is_reasoning_end(on, tok)
    assert fmt.is_reasoning_end(off, tok)
    assert not fmt.is_reasoning_end(history, tok)
    assert fmt.is_reasoning_end(on, tok, {"enable_thinking": False})
    out = tok.encode("<think>abc</think>de")
    assert fmt.count_reasoning_tokens(out, tok) == 3
    assert fmt.count_reasoning_tokens(tok.encode("abcd"), tok) == 4
    assert fmt.count_reasoning_tokens(out, tok, {"enable_thinking": False}) == 0
    text_tok = CharTokenizer(["<x>"])
    assert fmt.end_token_ids(text_tok) == [1000 + ord(c) for c in "</think>"]
    p = get_parser(reasoning_parser="qwen3", tokenizer=tok)
    s = p.stream(prompt_token_ids=off)
    assert not s.in_reasoning
    assert collect(s.feed("Hi") + s.finish()).content == "Hi"


def test_feed_after_finish_is_an_error() -> None:
    s = get_parser(reasoning_parser="qwen3").stream()
    s.finish()
    with pytest.raises(ValueError, match="after finish"):
        s.feed("x")
