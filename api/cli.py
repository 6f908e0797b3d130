"""The `thinkgate` command line: serve, run-batch, chat, bench."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from thinkgate.api.cli_args import add_model_args, add_server_args, resolve_model_args


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


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    level = ns.log_level or ("WARNING" if ns.command in ("chat", "bench") else "INFO")
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        _dispatch(ns)
    except (ValueError, FileNotFoundError) as exc:  # bad flags or files: a message, no traceback
        print(f"thinkgate {ns.command}: error: {exc}", file=sys.stderr)
        sys.exit(2)


def _dispatch(ns: argparse.Namespace) -> None:
    if ns.command == "serve" and ns.replicas is not None:
        if ns.replicas < 1:
            raise ValueError(f"--replicas must be >= 1, got {ns.replicas}")
        from thinkgate.api.ray_serve import serve_replicated

        serve_replicated(resolve_model_args(ns))
    elif ns.command == "serve":
        from thinkgate.api.launch import serve

        serve(resolve_model_args(ns))
    elif ns.command == "run-batch":
        from thinkgate.api.batch.offline import run_batch

        run_batch(resolve_model_args(ns))
    elif ns.command == "chat":
        from thinkgate.api.chat_cli import run_chat

        run_chat(ns)
    elif ns.command == "bench":
        rest = [a for a in ns.rest if a != "--"]
        sys.exit(subprocess.call([sys.executable, "-m", benchmarks()[ns.which], *rest]))


if __name__ == "__main__":
    main()
