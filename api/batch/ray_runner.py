"""`thinkgate run-batch --ray`: the same batch job on a Ray cluster with Ray Data.

The pending lines become a Ray dataset; `map_batches` runs them through a pool of `BatchReplica`
actors (one engine per actor, one GPU each when the cluster has GPUs), and each actor answers
through the same in-process app as the single-machine run, so results are identical. The driver
streams the result rows back and appends them to the output file as they arrive, so --resume
works the same way.

The dataset is built from the lines the driver read (not `ray.data.read_json`): a malformed line
must become one error line, and Ray's JSON reader would fail the whole read on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any

logger = logging.getLogger(__name__)

_LOCAL_NUM_CPUS = 8  # a 2-actor pool with ray.init(num_cpus=2) starves the read tasks


class BatchReplica:
    """One engine replica: a Ray Data actor mapping batches of lines to result lines."""

    def __init__(self, ns_vars: dict[str, Any]) -> None:
        from thinkgate.api.batch.in_process import InProcessClient

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.runner = InProcessClient(argparse.Namespace(**ns_vars))
        self.max_in_flight = int(ns_vars.get("max_in_flight") or 256)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        lines = [(int(n), str(t)) for n, t in zip(batch["line_no"], batch["text"])]
        return {"result": self.loop.run_until_complete(self._run(lines))}

    async def _run(self, lines: list[tuple[int, str]]) -> list[str]:
        from thinkgate.api.batch.lines import run_lines

        rows: list[str] = []
        async with self.runner.client() as client:
            await run_lines(client, lines, lambda r: rows.append(json.dumps(r)),
                            self.max_in_flight)
        return rows


def _init_ray(address: str | None) -> Any:
    import ray

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ray.data.DataContext.get_current().enable_progress_bars = False  # run-batch draws its own
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=_LOCAL_NUM_CPUS, include_dashboard=False, log_to_driver=False)
    return ray


def _replicas(ray: Any, requested: int | None) -> tuple[int, float]:
    """(number of replicas, GPUs per replica)."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--num-replicas must be >= 1, got {requested}")
        return requested, 1.0 if gpus >= requested else 0.0
    return (gpus, 1.0) if gpus else (1, 0.0)


def run_ray_batch(ns: argparse.Namespace, lines: list[tuple[int, str]]) -> None:
    from thinkgate.api.batch.lines import open_output

    ray = _init_ray(ns.ray_address)
    num_replicas, gpus_each = _replicas(ray, ns.num_replicas)
    ns_vars = {k: v for k, v in vars(ns).items() if k not in ("func",)}
    ns_vars["ray"] = False
    ns_vars["engine_in_process"] = True  # the actor is the replica's process
    progress = None
    if not ns.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=len(lines), unit="req", desc=f"run-batch (ray x{num_replicas})")
    written = 0
    with open_output(ns.output_file, ns.resume) as out:
        if lines:
            items = [{"line_no": n, "text": t} for n, t in lines]
            ds = ray.data.from_items(items).map_batches(
                BatchReplica,
                fn_constructor_kwargs={"ns_vars": ns_vars},
                batch_size=ns.ray_batch_size,
                compute=ray.data.ActorPoolStrategy(size=num_replicas),
                num_cpus=1,
                num_gpus=gpus_each,
            )
            for row in ds.iter_rows():
                out.write(row["result"] + "\n")
                out.flush()
                written += 1
                if progress is not None:
                    progress.update(1)
    if progress is not None:
        progress.close()
    print(f"run-batch: wrote {written} result lines to {ns.output_file} "
          f"({num_replicas} Ray replicas)", flush=True)
