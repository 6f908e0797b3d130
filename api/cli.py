"""The `thinkgate` command line: serve, run-batch, chat, bench."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

from thinkgate.api.cli_args import benchmarks, build_parser, resolve_model_args


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
