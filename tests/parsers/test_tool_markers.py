"""Where a tool start marker counts: anchored markers (only at the start of the answer), text a
section gives back keeping its whitespace, and a marker that is a prefix of a longer one."""

from __future__ import annotations

import json

import pytest
from parser_harness import split
from thinkgate.parsers import collect, get_parser
from thinkgate.parsers.markers import MarkerSet
from thinkgate.parsers.tools.scan import split_on_markers

CHUNKINGS = ["999", "1", "2", "3", "7", "rand0", "rand3"]


def _run(tool: str, text: str, how: str, reasoning: str | None = None):
    s = get_parser(tool_parser=tool, reasoning_parser=reasoning).stream()
    deltas = [d for chunk in split(text, how) for d in s.feed(chunk)] + s.finish()
    return collect(deltas), s


def _calls(m) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in m.tool_calls]


@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize(("tool", "text"), [
    ("pythonic", "See [1] ok, and [f(a=1)] is how you call f."),
    ("pythonic", "Answer: [get_weather(city='Paris')]"),
    ("xlam", 'The list [{"name": "f", "arguments": {}}] is a call.'),
    ("llama4_json", 'x = {"name": "f", "parameters": {"a": 1}}'),
])
def test_anchored_marker_after_text_is_content(tool: str, text: str, how: str) -> None:
    m, s = _run(tool, text, how)
    assert (m.content, m.tool_calls, s.num_completed_calls) == (text, [], 0)


@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize(("tool", "text", "calls"), [
    ("pythonic", "  \n[f(a=1), g()]", [("f", {"a": 1}), ("g", {})]),
    ("xlam", '[{"name": "f", "arguments": {"a": 1}}]', [("f", {"a": 1})]),
    ("llama3_json", '\n{"name": "f", "parameters": {"a": 1}}', [("f", {"a": 1})]),
    ("llama3_json", 'Sure. <|python_tag|>{"name": "f", "parameters": {}}', [("f", {})]),
])
def test_anchored_marker_at_the_start_opens_calls(tool: str, text: str, calls, how: str) -> None:
    m, _ = _run(tool, text, how)
    assert _calls(m) == calls


@pytest.mark.parametrize("how", CHUNKINGS)
def test_anchored_marker_right_after_reasoning(how: str) -> None:
    text = "<think>I could write [x] or {y}.</think>\n\n[f(a=1)]"
    m, _ = _run("pythonic", text, how, reasoning="deepseek_r1")
    assert m.reasoning == "I could write [x] or {y}." and m.content is None
    assert _calls(m) == [("f", {"a": 1})]
    m, _ = _run("pythonic", "<think>r</think>Hi. [f(a=1)]", how, reasoning="deepseek_r1")
    assert (m.content, m.tool_calls) == ("Hi. [f(a=1)]", [])


@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize(("tool", "text"), [
    ("hermes", "Sure <tool_call>{not json}</tool_call> ok"),
    ("hermes", "Checking. <tool_call>"),
    ("pythonic", "[1] ok"),
    ("qwen3_coder", "a <tool_call>\n<nope>\n</tool_call> b"),
    # a raw control character in a JSON key is not JSON: text, not an exception
    ("hermes", 'Sure <tool_call>{"na\tme": "f"}</tool_call> ok'),
    ("llama3_json", 'x {"a\nb": 1} y'),
])
def test_given_back_section_keeps_its_whitespace(tool: str, text: str, how: str) -> None:
    m, s = _run(tool, text, how)
    assert (m.content, m.tool_calls, s.num_completed_calls) == (text, [], 0)


@pytest.mark.parametrize("how", CHUNKINGS)
def test_llama3_json_finds_a_call_after_text(how: str) -> None:
    # vLLM's llama3_json reads a call object anywhere in the text (its tests: text around it)
    m, _ = _run("llama3_json", 'Use {"name": "f", "parameters": {}} to call f.', how)
    assert (m.content, _calls(m)) == ("Use to call f.", [("f", {})])


@pytest.mark.parametrize("how", CHUNKINGS)
def test_whitespace_around_a_real_call_keeps_one_gap(how: str) -> None:
    # the text either side of a call is joined by the whitespace before it (else after it);
    # ernie45 writes hermes' syntax and keeps the whitespace before the section less its
    # newlines (vLLM: `rstrip("\n")`), so the gap is the one after the call
    text = 'Sure. \n<tool_call>{"name": "f", "arguments": {}}</tool_call>\n\nDone.'
    m, _ = _run("ernie45", text, how)
    assert (m.content, _calls(m)) == ("Sure. \n\nDone.", [("f", {})])
    m, _ = _run("ernie45", 'Sure.<tool_call>{"name": "f", "arguments": {}}</tool_call> Done.', how)
    assert m.content == "Sure. Done."
    m, _ = _run("ernie45", 'Sure.<tool_call>{"name": "f", "arguments": {}}</tool_call>\n', how)
    assert m.content == "Sure."
    # hermes keeps the whitespace before its section (vLLM: the text before the call as written)
    m, _ = _run("hermes", text, how)
    assert (m.content, _calls(m)) == ("Sure. \n\n\nDone.", [("f", {})])


@pytest.mark.parametrize("match", [
    lambda ms, buf: ms.next_marker(buf),
    lambda ms, buf: split_on_markers(buf, tuple(ms.literals))[1],
])
def test_complete_marker_waits_while_a_longer_one_may_still_arrive(match) -> None:
    ms = MarkerSet(["[", "[TOOL_CALLS]", "<|python_tag|>", "<|py"])
    assert match(ms, "ok [TOOL") is None and ms.holdback("ok [TOOL") == len("[TOOL")
    assert match(ms, "ok [TOOL_CALLS]") is not None
    assert match(ms, "[TOOL]") is not None and match(ms, "[1, 2") is not None
    assert match(ms, "a <|python") is None  # "<|py" is complete, "<|python_tag|>" may follow
    assert ms.next_marker("ok [TOOL", final=True) == (3, 4, "[")
    # a longer marker that began before the complete one wins: wait for it
    ms2 = MarkerSet(["b", "abc"])
    assert match(ms2, "xab") is None and ms2.holdback("xab") == 2
    assert match(ms2, "xabd") is not None


@pytest.mark.parametrize("how", CHUNKINGS)
def test_xlam_tool_calls_marker_split_anywhere(how: str) -> None:
    text = '[TOOL_CALLS][{"name": "f", "arguments": {"a": [1]}}]'
    m, s = _run("xlam", text, how)
    assert (m.content, _calls(m), s.num_completed_calls) == (None, [("f", {"a": [1]})], 1)
    m, _ = _run("xlam", "Note: [TOOL_CALLS] is " + text, how)
    assert _calls(m) == [("f", {"a": [1]})]
