"""Developer tool, not part of `make test`: what vLLM 0.33's hermes parser returns for calls cut
by max_tokens, non-streamed and streamed (one character per delta), as JSON.

    PYTHONPATH=<folder holding thinkgate> /work/venvs/vllm033/bin/python \\
        -m thinkgate.benchmarks.hermes_cut_vllm [TEXTS.json]

The texts (default: `CUT_TEXTS`) are the demo model's outputs under `tool_choice: "required"`
cut at small max_tokens, plus a complete call followed by a cut second one. The output is what
`tests/constrained/test_cut_tool_calls.py` holds as facts (`VLLM`); needs the virtualenv
described in `parser_diff_vllm.py`.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from thinkgate.benchmarks import parser_diff_vllm as diff
from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS

TOOLS = [DEMO_TOOLS["get_weather"], DEMO_TOOLS["get_time"]]
_CALL = '<tool_call>{"name": "get_time", "arguments": {"city": "Tokyo"}}'
CUT_TEXTS = ['<tool_call>{"name": "get', '<tool_call>{"name": "get_time", "',
             '<tool_call>{"name": "get_time", "arguments": {"city',
             '<tool_call>{"name": "get_time", "arguments": {"city": "Tok', _CALL,
             _CALL + '</tool_call><tool_call>{"name": "get_weather", "arguments": {"ci',
             _CALL + "</tool_call>\n<tool_call>"]


def streamed(text: str) -> dict[str, Any]:
    """vLLM's hermes stream folded: content and each call's name and argument text."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    tok = diff.CharTokenizer(diff.markers_of("hermes", None))
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS)
    parser = Hermes2ProToolParser(tok, request.tools)
    ids = tok.encode(text)
    content, calls = "", {}  # type: ignore[var-annotated]
    prev_text, prev_ids = "", []
    for i in range(len(ids)):
        cur_ids = ids[: i + 1]
        cur = tok.decode(cur_ids)
        delta = parser.extract_tool_calls_streaming(prev_text, cur, cur[len(prev_text):],
                                                    prev_ids, cur_ids, cur_ids[len(prev_ids):],
                                                    request)
        for tc in (delta.tool_calls or []) if delta is not None else []:
            call = calls.setdefault(tc.index, {"name": None, "arguments": ""})
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
        content += (delta.content or "") if delta is not None else ""
        prev_text, prev_ids = cur, cur_ids
    return {"content": content or None,
            "calls": [[c["name"], c["arguments"]] for _, c in sorted(calls.items())]}


def main() -> None:
    logging.disable(logging.CRITICAL)  # vLLM logs each unparsable call with its traceback
    texts = json.load(open(sys.argv[1], encoding="utf-8")) if len(sys.argv) > 1 else CUT_TEXTS
    diff.TOOLS = TOOLS
    out = []
    for text in texts:
        _, content, calls = diff.vllm_parse("hermes", None, text, {})
        out.append({"text": text, "parse": {"content": content, "calls": [list(c) for c in calls]},
                    "stream": streamed(text)})
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
