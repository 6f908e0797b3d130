"""Tool-call streaming behaviour the traces cannot show: arguments arrive as they are written,
ids, completion events, cut-off calls, schema conversion and per-delta cost."""

from __future__ import annotations

import json
import time

import pytest
from thinkgate.parsers import collect, get_parser
from thinkgate.parsers.tools.convert import convert_value
from thinkgate.parsers.tools.repair import json_completion
from thinkgate.parsers.tools.scan import split_on_markers

TOOLS = [{"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}}}}]


def _feed_all(name: str, pieces: list[str]) -> tuple[list[list[dict]], object]:
    s = get_parser(tool_parser=name).stream(tools=TOOLS)
    per_feed = [s.feed(p) for p in pieces]
    per_feed.append(s.finish())
    return per_feed, s


@pytest.mark.parametrize(("name", "head", "mid", "tail"), [
    ("qwen3_coder", "<tool_call>\n<function=write>\n<parameter=path>\n/tmp/a", "bcdef",
     "\n</parameter>\n</function>\n</tool_call>"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0"
     "<|tool_call_argument_begin|>{\"path\": \"/tmp/a", "bcdef",
     "\"}<|tool_call_end|><|tool_calls_section_end|>"),
    ("deepseek_v32", "<｜DSML｜function_calls><｜DSML｜invoke name=\"write\">"
     "<｜DSML｜parameter name=\"path\" string=\"true\">/tmp/a", "bcdef",
     "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>"),
    ("mistral", "[TOOL_CALLS]write{\"path\": \"/tmp/a", "bcdef", "\"}"),
])
def test_string_arguments_stream_before_the_call_ends(name: str, head: str, mid: str,
                                                      tail: str) -> None:
    per_feed, s = _feed_all(name, [head, mid, tail])
    first, second = per_feed[0], per_feed[1]
    start = first[0]["tool_calls"][0]
    assert start["index"] == 0 and start["type"] == "function"
    assert start["function"]["name"] == "write" and start["id"]
    assert [d["tool_calls"][0]["function"]["arguments"] for d in second] == ["bcdef"]
    assert "id" not in second[0]["tool_calls"][0]
    msg = collect([d for feed in per_feed for d in feed])
    assert json.loads(msg.tool_calls[0].arguments) == {"path": "/tmp/abcdef"}
    assert s.num_completed_calls == 1


def test_kimi_id_comes_from_the_header_and_default_ids_are_unique() -> None:
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.write:7"
            "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>")
    assert get_parser(tool_parser="kimi_k2").parse(text).tool_calls[0].id == "functions.write:7"
    calls = get_parser(tool_parser="pythonic").parse("[write(n=1), write(n=2)]").tool_calls
    assert len({c.id for c in calls}) == 2
    assert all(c.id.startswith("chatcmpl-tool-") for c in calls)


def test_cut_off_call_keeps_valid_arguments_but_is_not_completed() -> None:
    per_feed, s = _feed_all("qwen3_coder", ["<tool_call>\n<function=write>\n<parameter=n>\n4"])
    msg = collect([d for feed in per_feed for d in feed])
    assert msg.tool_calls[0].name == "write" and json.loads(msg.tool_calls[0].arguments) == {}
    assert s.num_completed_calls == 0
    per_feed, s = _feed_all("hermes", ["ok"])
    assert s.num_completed_calls == 0


def test_region_that_is_not_a_call_is_content_verbatim() -> None:
    for name, text in [("jamba", "<tool_calls>{oops}</tool_calls> after"),
                       ("kimi_k2", "<|tool_calls_section_begin|>nothing here"),
                       ("gemma4", "<|tool_call>" + "x" * 300)]:
        msg = get_parser(tool_parser=name).parse(text)
        assert msg.tool_calls == [] and msg.content == text, name


@pytest.mark.parametrize(("prefix", "value"), [
    ('{"a": "x', {"a": "x"}), ('{"a": [1, {"b": tr', {"a": [1, {"b": True}]}),
    ('{"a": "x\\', {"a": "x\\"}), ('{"a"', {"a": None}), ('{"a": 1,', {"a": 1, "": None}),
    ("", {}), ('{"a": -', {"a": 0}), ('{"a": tx', None),
])
def test_json_completion(prefix: str, value: object) -> None:
    suffix = json_completion(prefix)
    if value is None:
        assert suffix is None
    else:
        assert suffix is not None and json.loads(prefix + suffix) == value


@pytest.mark.parametrize(("raw", "schema", "value"), [
    ("42", {"type": "integer"}, 42), ("4.0", {"type": "integer"}, 4),
    ("4.5", {"type": "integer"}, "4.5"), ("1e3", {"type": "number"}, 1000.0),
    ("FALSE", {"type": "boolean"}, False), ("None", {"type": "null"}, None),
    ("[1, 'a']", {"type": "array"}, [1, "a"]), ('{"k": 1}', {"type": "object"}, {"k": 1}),
    ("x", {"type": ["integer", "string"]}, "x"), ("3", {"type": ["integer", "string"]}, 3),
    ("3", None, "3"), ("nan", {"type": "number"}, "nan"),
    ("2", {"enum": [1, 2, 3]}, 2),
])
def test_convert_value(raw: str, schema: dict | None, value: object) -> None:
    assert convert_value(raw, schema) == value


def test_split_on_markers_holds_only_possible_markers() -> None:
    assert split_on_markers("ab<tool", ("<tool_call>",)) == ("ab", None, "<tool")
    assert split_on_markers("ab<x", ("<tool_call>",)) == ("ab<x", None, "")
    assert split_on_markers("a]<]m[>[<", ("]<]m[>[<", "]<]m[>[</x>")) == ("a", None, "]<]m[>[<")
    assert split_on_markers("a<b>c", ("<b>",)) == ("a", "<b>", "c")


@pytest.mark.parametrize("name", ["qwen3_coder", "kimi_k2", "pythonic", "gemma4", "llama3_json",
                                  "deepseek_v32", "minimax_m3", "jamba"])
def test_per_delta_cost_is_flat(name: str) -> None:
    """Feeding a 16x longer argument one character at a time costs about 16x, not 256x."""
    # CPU time of this thread (not wall time), so other processes on the machine do not count;
    # quadratic work would make the ratio about 256, linear about 16.
    def run(n: int) -> float:
        body = {"qwen3_coder": "<tool_call>\n<function=write>\n<parameter=path>\n{}",
                "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0"
                           "<|tool_call_argument_begin|>{{\"path\": \"{}",
                "pythonic": "[write(path=\"{}",
                "gemma4": "<|tool_call>call:write{{path:<|\"|>{}",
                "llama3_json": "{{\"name\": \"write\", \"arguments\": {{\"path\": \"{}",
                "deepseek_v32": "<｜DSML｜function_calls><｜DSML｜invoke name=\"write\">"
                                "<｜DSML｜parameter name=\"path\" string=\"true\">{}",
                "minimax_m3": "]<]minimax[>[<tool_call>]<]minimax[>[<invoke name=\"write\">"
                              "]<]minimax[>[<path>{}",
                "jamba": "<tool_calls>[{{\"name\": \"write\", \"arguments\": {{\"path\": \"{}",
                }[name]
        text = body.format("ab, c" * n)
        s = get_parser(tool_parser=name).stream(tools=TOOLS)
        t = time.thread_time()
        for ch in text:
            s.feed(ch)
        s.finish()
        return time.thread_time() - t

    small, large = min(run(200) for _ in range(3)), min(run(3200) for _ in range(3))
    assert large / small < 16 * 2.5, (small, large)


class _SpecialTokenizer:
    """Kimi's markers are single special tokens a skipping detokenizer drops from the text."""

    vocab = {"<|tool_calls_section_begin|>": 1, "<|tool_call_begin|>": 2,
             "<|tool_call_argument_begin|>": 3, "<|tool_call_end|>": 4,
             "<|tool_calls_section_end|>": 5}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.vocab.get(token, 0)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab[text]] if text in self.vocab else [9] * len(text)

    def decode(self, ids: list[int]) -> str:
        return "x" * len(ids)


def test_special_token_markers_are_recognised_by_id() -> None:
    s = get_parser(tool_parser="kimi_k2", tokenizer=_SpecialTokenizer()).stream()
    deltas: list[dict] = []
    for text, ids in [("", [1]), ("", [2]), ("functions.f:0", [10, 11]), ("", [3]),
                      ('{"a": 1}', [12]), ("", [4]), ("", [5])]:
        deltas += s.feed(text, ids)
    msg = collect(deltas + s.finish())
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls] == [
        ("functions.f:0", "f", '{"a": 1}')]
    assert msg.content is None
