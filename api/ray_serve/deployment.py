"""`thinkgate serve --replicas N`: the same OpenAI app on N Ray Serve replicas, one engine each.

    import ray
    from ray import serve
    from thinkgate.api.ray_serve import build_app

    ray.init(address="auto")  # or nothing: a local Ray
    serve.run(build_app(["/models/qwen3-8b", "--max-num-seqs", "64"], num_replicas=4),
              route_prefix="/")
    # or from a shell: serve run thinkgate.api.ray_serve:app_builder replicas=4 max_num_seqs=64

Two deployments. `ThinkgateIngress` (`ingress.py`: one light replica, no engine) takes every
HTTP request from Serve's proxy, keys its prompt by the prefix cache's block hashes and hands it
through a deployment handle whose request router is prefix-aware (`routing.py`) to a
`ThinkgateReplica`: an engine (its core in a process of its own) under the app `thinkgate serve`
builds (`server/app.py`'s `build_app` over `launch.py`'s `build_state`), which answers it
(`relay.py` carries the request and the ASGI messages back; streams stay streams). No OpenAI
route is written here. What this module adds to the app on each replica:

- `check_health`: Ray Serve calls it every `health_check_period_s`; it raises once the replica's
  engine core has died, so Serve replaces the replica (a fresh engine) and stops routing to it.
  Streams open on the dead engine have already ended with an `engine_dead` error event.
- `/health` answers for the deployment: 200 `{"status": "ok"}` with every replica serving,
  200 `{"status": "degraded"}` while some but not all do, 503 `{"status": "dead"}` with none.
- every response names the replica that answered in `x-thinkgate-replica`
  (`<replica id>@<host>:<pid>`); `/metrics` answers every replica's series with a `replica`
  label (`metrics.py`).
- a replica whose engine core died leaves (its process exits once its open streams have their
  error event), so Serve's routers stop sending it requests at once; a request that reaches it
  meanwhile is not run and the ingress sends it to another replica.

Files and online batches live with the ingress (its `--batch-dir`), so a replica's death loses
no batch: its lines run again on the live replicas.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.config import DeploymentActorConfig, RequestRouterConfig
from thinkgate.api.batch.store import default_batch_dir
from thinkgate.api.ray_serve.ingress import ThinkgateIngress
from thinkgate.api.ray_serve.metrics import BOARD_NAME, MetricsBoard
from thinkgate.api.ray_serve.routing import PrefixAwareRouter, PrefixPolicy

logger = logging.getLogger(__name__)

REPLICA_HEADER = "x-thinkgate-replica"
DEFAULT_HEALTH_CHECK_PERIOD_S = 2.0
_STATUS_TTL_S = 1.0  # /health reads the controller's replica counts at most this often
_ENGINE_POLL_S = 0.1  # how often a replica looks whether its engine core still runs
_DRAIN_S = 5.0  # after the engine died: the longest wait for open streams to end
_METRICS_POST_S = 2.0  # each replica posts its /metrics text this often (and on each scrape)
_SHUTDOWN_S = 30.0  # `serve.shutdown()` gets this long before Ray itself is stopped
_PROXY_PATIENCE = ("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S")
_PROXY_PATIENCE_S = 60.0  # for each of those, on a cluster this process starts


def serve_args(args: Sequence[str] | dict[str, Any] | None) -> argparse.Namespace:
    """`thinkgate serve` flags (a list, or a dict of flag name → value, as `serve run` passes
    its `key=value` arguments) → the resolved namespace."""
    from thinkgate.api.cli_args import build_parser, resolve_model_args

    if isinstance(args, dict):
        flags: list[str] = []
        for key, value in args.items():
            flag = "--" + key.replace("_", "-")
            switch = str(value).lower() if isinstance(value, (bool, str)) else None
            if switch == "true":  # `serve run ... enforce_eager=true` passes the text
                flags.append(flag)
            elif value is not None and switch != "false":
                flags += [flag, str(value)]
        args = flags
    return resolve_model_args(build_parser().parse_args(["serve", *(args or ())]))


class ThinkgateReplica:
    """One replica: an engine (its own core process) and the `thinkgate serve` app over it."""

    async def __init__(self, ns_vars: dict[str, Any]) -> None:
        from thinkgate.api.launch import build_state

        ns = argparse.Namespace(**ns_vars)
        context = serve.get_replica_context()
        self.app_name, self.deployment = context.app_name, context.deployment
        self.num_replicas = int(ns_vars.get("replicas") or context.world_size or 1)
        self.replica_tag = context.replica_id.unique_id
        self.replica_id = f"{self.replica_tag}@{socket.gethostname()}:{os.getpid()}"
        # files and batches are the ingress's (ingress.py); a replica's own folder stays unused
        root = Path(ns.batch_dir) if ns.batch_dir is not None else default_batch_dir()
        ns.batch_dir = str(root / "replicas" / f"replica-{context.rank.rank}")
        self.state = build_state(ns)
        self.state.cluster = self
        self._counts: tuple[float, int] = (0.0, 0)
        await self._start_app()
        logger.info("replica %s: engine ready (core pid %s)", self.replica_id,
                    getattr(self.state.engine, "pid", os.getpid()))

    async def _start_app(self) -> None:
        """The app over this engine, its lifespan started as a server would (and stopped in
        `__del__`: the engine core shuts down with it)."""
        from thinkgate.api.server.app import build_app as build_fastapi_app
        from thinkgate.api.server.guard import in_process_app
        from uvicorn.config import Config
        from uvicorn.lifespan.on import LifespanOn

        app = build_fastapi_app(self.state)
        app.add_middleware(ReplicaHeader, value=self.replica_id)  # outermost
        self.app, self.in_process_app = app, in_process_app(app)
        self._lifespan = LifespanOn(Config(app, lifespan="on", log_level=None, log_config=None,
                                           access_log=False))
        await self._lifespan.startup()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._exit_when_engine_dies()),
                       loop.create_task(self._post_metrics_every(_METRICS_POST_S))]

    async def __del__(self) -> None:
        """Serve's graceful shutdown of this replica."""
        for task in getattr(self, "_tasks", ()):
            task.cancel()
        if hasattr(self, "_lifespan"):
            await self._lifespan.shutdown()

    async def handle_http(self, request: dict[str, Any], **routing: Any,
                          ) -> AsyncIterator[dict[str, Any]]:
        """One HTTP request relayed by the ingress (`relay.py`): the app's ASGI messages.
        `routing` holds what the router read (`prefix_hashes`, `avoid`) and `batch_line`."""
        from thinkgate.api.ray_serve.relay import ENGINE_DEAD, run_asgi

        if getattr(self.state.engine, "error", None) is not None:
            yield {"type": ENGINE_DEAD, "replica": self.replica_tag}
            return
        if routing.get("batch_line"):
            self.state.mark_batch_work()
        app = self.in_process_app if request.get("in_process") else self.app
        async for message in run_asgi(app, request):
            yield message

    async def _exit_when_engine_dies(self) -> None:
        """Leave the cluster soon after the engine core dies: its open streams end with their
        `engine_dead` event first (bounded wait), then this process exits. Serve's routers see
        the replica gone at once and send new requests (and those this replica had not yet
        accepted) to the live ones; the controller starts a replacement. Waiting for the next
        health check instead would leave this replica answering 503 for seconds."""
        while getattr(self.state.engine, "error", None) is None:  # a shutdown is no death
            await asyncio.sleep(_ENGINE_POLL_S)
        logger.error("replica %s: %s; leaving after %d open requests end", self.replica_id,
                     self.state.engine.error, self.state.in_flight)
        deadline = time.monotonic() + _DRAIN_S
        while self.state.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # the last events' bytes leave through the proxy
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._board().drop.remote(self.replica_id), 1.0)
        logging.shutdown()
        os._exit(1)

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose engine died is replaced."""
        if not getattr(self.state.engine, "is_running", True):
            raise RuntimeError(f"replica {self.replica_id}: the engine core is not running")

    async def health(self) -> tuple[int, dict[str, Any]]:
        """/health for the whole deployment, as far as this replica can tell: Serve's count of
        running replicas, less this one when its engine has died (Serve has not seen it yet)."""
        own = bool(getattr(self.state.engine, "is_running", True))
        running = await self._running_replicas()
        serving = max(running - (0 if own else 1), 1 if own else 0)
        status = "ok" if serving >= self.num_replicas else "degraded" if serving else "dead"
        body = {"status": status, "replicas": {"serving": serving, "target": self.num_replicas},
                "replica": {"id": self.replica_id, "engine_running": own}}
        return (503 if status == "dead" else 200), body

    async def metrics(self) -> str:
        """/metrics for the deployment: every live replica's series, labelled `replica`."""
        from thinkgate.api.ray_serve.metrics import merge_expositions

        own = self.state.metrics.render().decode()
        try:
            board = self._board()
            await board.post.remote(self.replica_id, own)
            texts = await board.fresh.remote()
        except Exception:  # the board is being replaced: this replica's own series
            logger.warning("could not reach the metrics board", exc_info=True)
            texts = {self.replica_id: own}
        return merge_expositions(texts)

    async def _post_metrics_every(self, period_s: float) -> None:
        while True:
            try:
                await self._board().post.remote(self.replica_id,
                                                self.state.metrics.render().decode())
            except Exception:
                logger.debug("could not post metrics", exc_info=True)
            await asyncio.sleep(period_s)

    def _board(self) -> Any:
        from thinkgate.api.ray_serve.metrics import BOARD_NAME

        return serve.get_deployment_actor(BOARD_NAME)

    async def _running_replicas(self) -> int:
        fetched_at, count = self._counts
        if time.monotonic() - fetched_at > _STATUS_TTL_S:
            try:
                count = await asyncio.to_thread(self._count_running)
            except Exception:  # the controller is busy or restarting: say what we know
                logger.warning("could not read the replica states", exc_info=True)
                count = 1
            self._counts = (time.monotonic(), count)
        return count

    def _count_running(self) -> int:
        app = serve.status().applications.get(self.app_name)
        deployment = app.deployments.get(self.deployment) if app is not None else None
        if deployment is None:
            return 1
        return sum(n for state, n in deployment.replica_states.items()
                   if str(getattr(state, "value", state)) == "RUNNING")


class ReplicaHeader:
    """ASGI middleware: `x-thinkgate-replica: <value>` on every HTTP response."""

    def __init__(self, app: Any, value: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), value.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)

        await self.app(scope, receive, tagged_send)


def build_app(args: Sequence[str] | dict[str, Any] | argparse.Namespace | None = None, *,
              num_replicas: int | None = None,
              ray_actor_options: dict[str, Any] | None = None,
              health_check_period_s: float = DEFAULT_HEALTH_CHECK_PERIOD_S,
              name: str = "ThinkgateReplica", routing: str | None = None,
              routing_options: dict[str, Any] | None = None) -> serve.Application:
    """A Ray Serve application of `num_replicas` thinkgate replicas behind one ingress for
    `serve.run`. `routing`: "prefix" (prefix-aware, `routing.py`; the default) or "round_robin"
    (default: `--replica-routing`);
    `routing_options` are `PrefixPolicy`'s (min_prefix_blocks, balance, max_imbalance).

    `args` are `thinkgate serve` flags (`["MODEL", "--max-num-seqs", "64"]`; a dict of flag names
    → values; or the parsed namespace); `--replicas` among them sets `num_replicas` (default 1).
    `ray_actor_options` defaults to one CPU per replica, plus one GPU (or a share of one) when
    Ray is already started on a cluster with GPUs and `--device` is not cpu; before `ray.init`,
    pass `ray_actor_options={"num_cpus": 1, "num_gpus": 1}` for GPU replicas."""
    ns = args if isinstance(args, argparse.Namespace) else serve_args(args)
    replicas = num_replicas if num_replicas is not None else getattr(ns, "replicas", None) or 1
    if replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {replicas}")
    if health_check_period_s <= 0:
        raise ValueError(f"health_check_period_s must be > 0, got {health_check_period_s}")
    ns_vars = {**vars(ns), "replicas": replicas, "engine_in_process": False}
    ns_vars.pop("func", None)
    routing = routing or getattr(ns, "replica_routing", None) or "prefix"
    PrefixPolicy(mode=routing, **(routing_options or {}))  # bad options fail here
    router = RequestRouterConfig(request_router_class=PrefixAwareRouter,
                                 request_router_kwargs={"mode": routing,
                                                        **(routing_options or {})})
    board = DeploymentActorConfig(name=BOARD_NAME, actor_class=ray.remote(MetricsBoard),
                                  actor_options={"num_cpus": 0})
    deployment = serve.deployment(ThinkgateReplica).options(
        deployment_actors=[board],
        name=name,
        num_replicas=replicas,
        ray_actor_options=ray_actor_options or _actor_options(ns, replicas),
        max_ongoing_requests=ns.max_concurrent_requests,
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=max(30.0, 3 * health_check_period_s),
        graceful_shutdown_timeout_s=10.0,
        request_router_config=router,
    )
    ingress = serve.deployment(ThinkgateIngress).options(
        name=f"{name}Ingress", num_replicas=1, ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=replicas * ns.max_concurrent_requests + 64)
    return ingress.bind(ns_vars, deployment.bind(ns_vars))


def app_builder(args: dict[str, Any]) -> serve.Application:
    """`serve run thinkgate.api.ray_serve:app_builder replicas=2 max_num_seqs=64` (and Serve
    config files): Serve's builder convention, one dict of `thinkgate serve` flag values."""
    return build_app(args)


def _actor_options(ns: argparse.Namespace, replicas: int) -> dict[str, Any]:
    """One CPU per replica; with GPUs in the (already started) cluster and `--device` not cpu,
    one GPU each, or a share of one when there are fewer GPUs than replicas."""
    gpus = 0.0
    if ns.device != "cpu" and ray.is_initialized():
        gpus = float(ray.cluster_resources().get("GPU", 0))
    each = min(1.0, gpus / replicas) if gpus else 0.0
    if 0 < each < 1:
        logger.warning("%d replicas share %g GPUs: lower --gpu-memory-utilization so that their "
                       "engines fit together", replicas, gpus)
    return {"num_cpus": 1, "num_gpus": each}


def serve_replicated(ns: argparse.Namespace) -> None:
    """`thinkgate serve --replicas N`: start or join Ray, run the app, answer until interrupted."""
    import signal
    import threading

    if not ray.is_initialized():
        if ns.ray_address:
            ray.init(address=ns.ray_address)
        else:  # this machine: room for every replica and a replacement while one restarts
            # Serve gives its HTTP proxy 5 s to report ready (10 s a health check), three tries,
            # then fails `serve.start`: on a busy machine (load 6 on 2 cores) the proxy needed
            # more. The local cluster's processes inherit this environment; a user's value wins.
            for var in _PROXY_PATIENCE:
                os.environ.setdefault(var, str(_PROXY_PATIENCE_S))
            cpus = os.cpu_count() or 1
            ray.init(num_cpus=max(cpus, ns.replicas + 1), include_dashboard=False)
            if ns.engine_threads is None and ns.device in ("auto", "cpu"):
                ns.engine_threads = max(1, cpus // ns.replicas)
    serve.start(http_options={"host": ns.host, "port": ns.port})
    serve.run(build_app(ns), name="thinkgate", route_prefix="/")
    print(f"thinkgate: serving {ns.served_model_name[0]!r} on http://{ns.host}:{ns.port}/v1 "
          f"({ns.replicas} Ray Serve replicas)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    print("thinkgate: shutting the replicas down", flush=True)
    closing = threading.Thread(target=serve.shutdown, daemon=True)
    closing.start()
    closing.join(_SHUTDOWN_S)  # then ray.shutdown() stops the local cluster, replicas and all
    ray.shutdown()
