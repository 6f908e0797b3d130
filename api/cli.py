"""The `thinkgate` command line."""

from __future__ import annotations

import argparse
import json


def _demo(model: str | None) -> None:
    """Generate one chat answer on the model with transformers and print the parsed message."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.demo_data import TOOLS
    from thinkgate.parsers import get_parser

    path = model or demo_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path).eval()
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    tools = [TOOLS["get_weather"]]
    prompt = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                     add_generation_prompt=True)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    with torch.inference_mode():
        out = lm.generate(ids, max_new_tokens=128, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    parsed = get_parser(tool_parser="hermes", reasoning_parser="qwen3").parse(text, tools=tools)
    message = {"role": "assistant", "reasoning": parsed.reasoning, "content": parsed.content,
               "tool_calls": [{"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}}
                              for c in parsed.tool_calls]}
    print(json.dumps(message, indent=2))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="thinkgate", description="thinkgate LLM engine")
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a model (default: the bundled demo model)")
    serve.add_argument("model", nargs="?", default=None)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    if args.command == "serve":
        _demo(args.model)


if __name__ == "__main__":
    main()
