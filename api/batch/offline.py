"""`thinkgate run-batch`: read the input, skip what --resume finds done, run, append results."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any

from thinkgate.api.batch.in_process import InProcessClient
from thinkgate.api.batch.lines import (
    finished_keys,
    open_output,
    pending_lines,
    read_lines,
    run_lines,
)

logger = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per batch request


async def run_in_process(
    runner: InProcessClient, lines: list[tuple[int, str]], out: Any, max_in_flight: int,
    progress: Any,
) -> int:
    """Run `lines` through the app; each result line is written and flushed as it lands."""
    written = 0

    def emit(row: dict[str, Any]) -> None:
        nonlocal written
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        written += 1
        if progress is not None:
            progress.update(1)

    async with runner.client() as client:
        await run_lines(client, lines, emit, max_in_flight)
    return written


def run_batch(ns: argparse.Namespace) -> None:
    lines = read_lines(ns.input_file)
    done = finished_keys(ns.output_file) if ns.resume else set()
    todo = list(pending_lines(lines, done))
    skipped = len(lines) - len(todo)
    if skipped:
        print(f"run-batch: {skipped} of {len(lines)} lines already done; running {len(todo)}",
              flush=True)
    if not todo:
        print(f"run-batch: nothing to run; {ns.output_file} is complete", flush=True)
        return
    if ns.ray:
        from thinkgate.api.batch.ray_runner import run_ray_batch

        run_ray_batch(ns, todo)
        return
    runner = InProcessClient(ns)
    progress = None
    if not ns.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=len(todo), unit="req", desc="run-batch")
    try:
        with open_output(ns.output_file, ns.resume) as out:
            written = asyncio.run(run_in_process(runner, todo, out, ns.max_in_flight, progress))
    finally:
        if progress is not None:
            progress.close()
        shutdown = getattr(runner.state.engine, "shutdown", None)
        if shutdown is not None:
            result = shutdown()
            if asyncio.iscoroutine(result):
                asyncio.run(result)
    print(f"run-batch: wrote {written} result lines to {ns.output_file}", flush=True)
