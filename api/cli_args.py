"""The `thinkgate` command line's flags (vLLM's names): those `serve`, `run-batch`, `chat` and
`bench` share, and the whole parser (`build_parser`, also read by Ray Serve's `serve run`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from thinkgate.api.server.guard import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_UPLOAD_BYTES
from thinkgate.parsers.auto import AUTO, resolve_auto_parsers

DEMO_REASONING_PARSER = "qwen3"
DEMO_TOOL_PARSER = "hermes"


def _json_list(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError(f"expected a JSON list of strings, got {text!r}")
    return value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def add_model_args(p: argparse.ArgumentParser, positional: bool = True) -> None:
    """The model, its parsers and the engine's sizes."""
    if positional:
        p.add_argument("model_tag", nargs="?", default=None, metavar="MODEL",
                       help="HF model folder, or a bundled model's name: thinkgate-demo (the "
                            "default), thinkgate-reasoner")
    p.add_argument("--model", default=None, help="same as MODEL")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's)")
    p.add_argument("--served-model-name", nargs="+", default=None,
                   help="model name(s) the API answers to (default: the model path)")
    p.add_argument("--reasoning-parser", default=None,
                   help="reasoning format, e.g. qwen3, or auto: read from the chat template "
                        "(default for a model folder; demo model default: qwen3)")
    p.add_argument("--tool-call-parser", default=None,
                   help="tool-call format, e.g. hermes, or auto: read from the chat template "
                        "(default for a model folder; demo model default: hermes)")
    p.add_argument("--enable-auto-tool-choice", action="store_true",
                   help="let the model decide to call tools (tool_choice auto)")
    p.add_argument("--exclude-tools-when-tool-choice-none", action="store_true",
                   help="leave the tools out of the prompt when tool_choice is none (by "
                        "default the chat template sees them, as in vLLM)")
    p.add_argument("--reasoning-parser-plugin", default=None,
                   help="Python file that registers more reasoning parsers")
    p.add_argument("--tool-parser-plugin", default=None,
                   help="Python file that registers more tool parsers")
    p.add_argument("--chat-template", default=None,
                   help="Jinja chat template (file path or the template text)")
    p.add_argument("--default-chat-template-kwargs", type=_json_object, default=None,
                   help='JSON object for every chat template, e.g. {"enable_thinking": false}')
    p.add_argument("--max-model-len", type=int, default=None, help="context length in tokens")
    p.add_argument("--max-num-seqs", type=int, default=256, help="sequences run at once")
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block-size", type=int, default=16, help="KV-cache block size in tokens")
    p.add_argument("--num-kv-blocks", type=int, default=None)
    p.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enforce-eager", action="store_true", default=None,
                   help="no torch.compile and no CUDA graphs: every step runs eagerly (default: "
                        "CPU decode steps compiled before serving, CUDA graphs on CUDA)")
    p.add_argument("--attention-backend", default=None, choices=["TRITON_ATTN", "TORCH_SDPA"],
                   help="TRITON_ATTN: paged Triton kernels (default on CUDA); TORCH_SDPA: "
                        "gather the blocks and run torch SDPA (default on CPU)")
    p.add_argument("--prefill-delay-steps", type=int, default=0,
                   help="decode steps a few new requests may wait so that they are prefilled "
                        "together while others decode (0: prefill each arrival at once)")
    p.add_argument("--no-jump-forward", dest="jump_forward", action="store_false",
                   help="decode grammar-forced text one token per step (default: write it in "
                        "one forward; per request: structured_outputs.jump_forward)")
    p.add_argument("--complete-before-max-tokens", action="store_true",
                   help="JSON and tool-call constraints write the shortest valid completion "
                        "when the tokens left only fit it (a request's structured_outputs."
                        "complete_before_max_tokens overrides)")
    p.add_argument("--unbounded-json-numbers", action="store_true",
                   help="let JSON numbers have any number of digits (default: 16 integer, 16 "
                        "fraction, 3 exponent digits; structured_outputs.bound_numbers "
                        "overrides)")
    p.add_argument("--structured-outputs-compile-timeout", type=float, default=30.0,
                   help="seconds a request's grammar may compile (off the step loop, the other "
                        "requests decoding meanwhile) before that request fails with a 400")
    p.add_argument("--structured-outputs-backend", choices=["auto", "xgrammar", "guidance"],
                   default="auto",
                   help="the grammar backend (vLLM's names): auto picks per constraint (llguidance "
                        "for JSON schemas and regexes, xgrammar for EBNF, choices and tool-call "
                        "tags; the other when the first refuses), or one alone")
    p.add_argument("--structured-outputs-disable-additional-properties", action="store_true",
                   help="JSON objects take only the properties their schema lists, even where "
                        "the schema allows others (vLLM's guidance option)")
    p.add_argument("--speculative-config", type=_json_object, default=None,
                   help='speculative decoding (vLLM\'s flag), e.g. \'{"method": "ngram", '
                        '"num_speculative_tokens": 4, "prompt_lookup_max": 4}\' (drafts from '
                        'the prompt and output) or \'{"method": "suffix"}\' (from earlier '
                        "requests' outputs too); each position sampled under its grammar mask")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True, help="reuse the KV of cached prompt prefixes (default on; "
                   "--no-enable-prefix-caching turns it off)")
    p.add_argument("--engine-in-process", action="store_true",
                   help="run the engine's step loop on a thread of this process (default: the "
                        "engine core runs in a process of its own)")
    p.add_argument("--engine-threads", type=int, default=None,
                   help="torch threads of the engine core process (default on CPU: every core "
                        "available, one fewer for models under 32 MiB of weights)")


def add_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None,
                   help="require `Authorization: Bearer KEY` on /v1, /tokenize, /detokenize "
                        "(env THINKGATE_API_KEY also works)")
    p.add_argument("--allowed-origins", type=_json_list, default=None,
                   help='CORS origins as a JSON list, e.g. \'["http://localhost:3000"]\'; '
                        '\'["*"]\' allows any (default: loopback origins and the server\'s own)')
    p.add_argument("--allowed-methods", type=_json_list, default=["*"],
                   help="CORS methods as a JSON list")
    p.add_argument("--allowed-headers", type=_json_list, default=["*"],
                   help="CORS headers as a JSON list")
    p.add_argument("--allow-credentials", action="store_true", help="CORS credentials")
    p.add_argument("--allowed-hosts", type=_json_list, default=None,
                   help="Host names answered besides loopback ones, as a JSON list; '[\"*\"]' "
                        "any (default: loopback names only when bound to a loopback address, "
                        "any name otherwise)")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                   help="larger request bodies get 413 before they are read (default 32 MiB)")
    p.add_argument("--max-upload-bytes", type=int, default=DEFAULT_MAX_UPLOAD_BYTES,
                   help="the same for POST /v1/files uploads (default 512 MiB)")
    p.add_argument("--max-concurrent-requests", type=int, default=512,
                   help="generation requests in flight (running + queued) before answering 429")
    p.add_argument("--responses-store-size", type=int, default=1024,
                   help="stored /v1/responses kept in memory (for retrieve and "
                        "previous_response_id); the oldest is evicted first; 0 stores none")
    p.add_argument("--batch-dir", default=None,
                   help="folder for /v1/files and /v1/batches (uploads, batch state, results); "
                        "unfinished batches resume from it at start-up (default: "
                        "$XDG_CACHE_HOME/thinkgate/batches or ~/.cache/thinkgate/batches)")
    p.add_argument("--max-batch-in-flight", type=int, default=64,
                   help="online batch lines in the engine at once; they also leave one "
                        "--max-num-seqs slot free for online requests and wait while any are "
                        "queued")
    p.add_argument("--uvicorn-log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug", "trace"])


def resolve_model_args(ns: argparse.Namespace) -> argparse.Namespace:
    """Fill in the defaults: no model means the demo model with qwen3 + hermes + auto tool
    choice, and so does a bundled model's name (`thinkgate-reasoner`); a model folder without
    parser flags gets `auto` (names read off its chat template)."""
    from thinkgate.engine.demo import is_bundled_name

    model = getattr(ns, "model_tag", None) or ns.model
    ns.model = model
    if model is None or is_bundled_name(model):
        ns.reasoning_parser = ns.reasoning_parser or DEMO_REASONING_PARSER
        ns.tool_call_parser = ns.tool_call_parser or DEMO_TOOL_PARSER
        ns.enable_auto_tool_choice = True
    else:
        ns.reasoning_parser = ns.reasoning_parser or AUTO
        ns.tool_call_parser = ns.tool_call_parser or AUTO
    if AUTO in (ns.reasoning_parser, ns.tool_call_parser):
        from thinkgate.api.launch import chat_template_text
        from thinkgate.engine.model.model_loader import resolve_model_path

        folder = ns.tokenizer or str(resolve_model_path(model)[0])
        ns.tool_call_parser, ns.reasoning_parser = resolve_auto_parsers(
            ns.tool_call_parser, ns.reasoning_parser, folder,
            chat_template=chat_template_text(getattr(ns, "chat_template", None)))
    if ns.served_model_name is None:
        ns.served_model_name = [model or "thinkgate-demo"]
    return ns


def benchmarks() -> dict[str, str]:
    """name -> module of every `benchmarks/bench_<name>.py` (server, engine, kernels, ...)."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    return {p.stem.removeprefix("bench_"): f"thinkgate.benchmarks.{p.stem}"
            for p in sorted(folder.glob("bench_*.py"))}


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (default: the bundled demo model)",
        description="Serve MODEL over an OpenAI-compatible API. With no MODEL, the bundled demo "
                    "model with --reasoning-parser qwen3 --tool-call-parser hermes "
                    "--enable-auto-tool-choice.")
    add_model_args(p)
    add_server_args(p)
    p.add_argument("--replicas", type=int, default=None,
                   help="serve on Ray Serve with N replicas, one engine each, behind Ray "
                        "Serve's HTTP proxy on --host/--port (needs the `ray-serve` extra)")
    p.add_argument("--ray-address", default=None,
                   help="--replicas: the Ray cluster to join (default: start a local Ray)")
    p.add_argument("--replica-routing", default="prefix", choices=["prefix", "round_robin"],
                   help="--replicas: send prompts that share a prefix to the replica whose "
                        "prefix cache holds it, within a load bound (prefix, the default), or "
                        "plain round robin")


def _batch_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run-batch", help="offline batch over an OpenAI batch JSONL file",
        description="Run every line of an OpenAI batch file (/v1/chat/completions and "
                    "/v1/completions) through one engine and write one result line per input.")
    p.add_argument("-i", "--input-file", required=True, help="OpenAI batch JSONL input")
    p.add_argument("-o", "--output-file", required=True, help="JSONL results (written as it goes)")
    p.add_argument("--resume", action="store_true",
                   help="keep the output file and skip the custom_ids already in it")
    p.add_argument("--max-in-flight", type=int, default=256,
                   help="lines submitted to the engine at once")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--ray", action="store_true",
                   help="run on a Ray cluster with Ray Data (one engine replica per worker)")
    p.add_argument("--num-replicas", type=int, default=None,
                   help="--ray: engine replicas (default: one per GPU, or 1 on CPU)")
    p.add_argument("--ray-address", default=None,
                   help="--ray: cluster address (default: start or join a local Ray)")
    p.add_argument("--ray-batch-size", type=int, default=16, help="--ray: lines per map batch")
    add_model_args(p, positional=False)


def _chat_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chat", help="interactive terminal chat showing reasoning and tool calls",
        description="Chat with a running thinkgate (or any OpenAI-compatible) server.")
    p.add_argument("--url", default="http://127.0.0.1:8000/v1", help="server base URL")
    p.add_argument("--model", default=None, help="model name (default: the server's first)")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--tools", default=None,
                   help="JSON file with a list of OpenAI tools to offer (default: the demo tools)")
    p.add_argument("--no-tools", action="store_true", help="offer no tools")
    p.add_argument("--no-thinking", action="store_true", help="enable_thinking: false")
    p.add_argument("-q", "--quick", default=None, help="send one message, print, exit")


def _bench_parser(sub: argparse._SubParsersAction) -> None:
    names = sorted(benchmarks())
    p = sub.add_parser("bench", help=f"run a benchmark ({', '.join(names)})",
                       description="Run one of thinkgate's benchmarks; arguments after `--` go "
                                   "to it (e.g. `thinkgate bench server -- --help`).")
    p.add_argument("which", choices=names, help="benchmark to run")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="thinkgate", description="thinkgate LLM engine")
    ap.add_argument("--log-level", default=None,
                    help="Python logging level (default: INFO for serve and run-batch, "
                         "WARNING for chat)")
    sub = ap.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _batch_parser(sub)
    _chat_parser(sub)
    _bench_parser(sub)
    return ap
