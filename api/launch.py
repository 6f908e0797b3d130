"""From parsed CLI flags to a running engine, the server state and the uvicorn server."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

from thinkgate.api.metrics import ServerMetrics
from thinkgate.api.server.app import ServerConfig, ServerState, build_app
from thinkgate.api.server.guard import (
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_UPLOAD_BYTES,
    allowed_hosts_for,
)

logger = logging.getLogger(__name__)


def load_plugins(ns: argparse.Namespace) -> None:
    """Import --reasoning-parser-plugin / --tool-parser-plugin files (they register parsers)."""
    from thinkgate.parsers import load_plugin

    for path in (ns.reasoning_parser_plugin, ns.tool_parser_plugin):
        if path:
            load_plugin(path)


def chat_template_text(value: str | None) -> str | None:
    """--chat-template takes a file path or the template itself."""
    if value is None:
        return None
    path = Path(value)
    if len(value) < 4096 and path.is_file():
        return path.read_text(encoding="utf-8")
    return value


def engine_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """The LLM/engine constructor arguments the flags name."""
    return {
        "model": ns.model,
        "tokenizer": ns.tokenizer,
        "dtype": ns.dtype,
        "device": ns.device,
        "seed": ns.seed,
        "max_model_len": ns.max_model_len,
        "max_num_seqs": ns.max_num_seqs,
        "max_num_batched_tokens": ns.max_num_batched_tokens,
        "block_size": ns.block_size,
        "num_kv_blocks": ns.num_kv_blocks,
        "kv_cache_memory_bytes": ns.kv_cache_memory_bytes,
        "gpu_memory_utilization": ns.gpu_memory_utilization,
        "trust_remote_code": ns.trust_remote_code,
        "enforce_eager": getattr(ns, "enforce_eager", None),
        "attention_backend": getattr(ns, "attention_backend", None),
        "complete_before_max_tokens": getattr(ns, "complete_before_max_tokens", False),
        "bound_json_numbers": not getattr(ns, "unbounded_json_numbers", False),
        "prefill_delay_steps": getattr(ns, "prefill_delay_steps", 0),
        "jump_forward": getattr(ns, "jump_forward", True),
        "enable_prefix_caching": getattr(ns, "enable_prefix_caching", True),
        "structured_outputs_compile_timeout": getattr(ns, "structured_outputs_compile_timeout",
                                                      30.0),
        "structured_outputs_backend": getattr(ns, "structured_outputs_backend", "auto"),
        "structured_outputs_disable_additional_properties": getattr(
            ns, "structured_outputs_disable_additional_properties", False),
        "speculative_config": getattr(ns, "speculative_config", None),
    }


def chat_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """The chat layer's settings the flags name."""
    return {
        "reasoning_parser": ns.reasoning_parser,
        "tool_call_parser": ns.tool_call_parser,
        "enable_auto_tool_choice": ns.enable_auto_tool_choice,
        "exclude_tools_when_tool_choice_none": ns.exclude_tools_when_tool_choice_none,
        "chat_template": chat_template_text(ns.chat_template),
        "default_chat_template_kwargs": ns.default_chat_template_kwargs,
    }


def start_engine(ns: argparse.Namespace) -> Any:
    """The async engine for these flags, with grammar-constrained decoding: by default its step
    loop runs in a process of its own (`engine/process/engine_client.py`); `--engine-in-process` keeps it
    on a thread of this process."""
    from thinkgate.engine.config import EngineConfig

    config = EngineConfig(**engine_kwargs(ns))
    if not getattr(ns, "engine_in_process", False):
        from thinkgate.engine.process.engine_client import EngineProcessClient

        plugins = tuple(p for p in (ns.reasoning_parser_plugin, ns.tool_parser_plugin) if p)
        return EngineProcessClient(config, ns.reasoning_parser, plugins,
                                   threads=getattr(ns, "engine_threads", None))
    from thinkgate.engine.core.llm_engine import LLMEngine
    from thinkgate.engine.process.async_engine import AsyncLLMEngine
    from thinkgate.engine.structured.constrained import ConstrainedDecoding

    llm_engine = LLMEngine(config)
    llm_engine.structured_output = ConstrainedDecoding.for_engine(llm_engine,
                                                                  ns.reasoning_parser)
    return AsyncLLMEngine.from_engine(llm_engine)


def build_state(ns: argparse.Namespace, engine: Any | None = None) -> ServerState:
    """Engine + chat layer + HTTP config for a parsed `serve`/`run-batch` command line."""
    from thinkgate.parsers import get_parser

    load_plugins(ns)
    get_parser(ns.tool_call_parser, ns.reasoning_parser)  # unknown names fail before the load
    # The chat layer's imports (transformers, xgrammar: seconds) run on a thread while the
    # engine core process starts and loads the model, instead of before it.
    importing = threading.Thread(target=importlib.import_module, args=("thinkgate.api.chat",),
                                 name="import-chat-layer", daemon=True)
    importing.start()
    engine = engine if engine is not None else start_engine(ns)
    importing.join()
    from thinkgate.api.chat import ChatLayer

    config = server_config(ns)
    metrics = ServerMetrics(config.served_model_names[0])
    chat = ChatLayer(engine.tokenizer, **chat_kwargs(ns), max_prompt_tokens=engine.max_model_len)
    state = ServerState(engine=engine, config=config, metrics=metrics, chat=chat,
                        max_model_len=engine.max_model_len,
                        max_num_seqs=getattr(ns, "max_num_seqs", None))
    stats = getattr(engine, "stats", None)
    if stats is not None:
        metrics.watch_engine(lambda: _engine_gauges(stats()))
    return state


def server_config(ns: argparse.Namespace) -> ServerConfig:
    """The HTTP layer's settings the flags name."""
    origins = getattr(ns, "allowed_origins", None)
    return ServerConfig(
        served_model_names=tuple(ns.served_model_name),
        api_key=getattr(ns, "api_key", None) or os.environ.get("THINKGATE_API_KEY"),
        allowed_origins=tuple(origins) if origins is not None else None,
        allowed_hosts=allowed_hosts_for(getattr(ns, "host", None),
                                        getattr(ns, "allowed_hosts", None)),
        max_request_bytes=getattr(ns, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
        max_upload_bytes=getattr(ns, "max_upload_bytes", DEFAULT_MAX_UPLOAD_BYTES),
        allowed_methods=tuple(getattr(ns, "allowed_methods", ["*"])),
        allowed_headers=tuple(getattr(ns, "allowed_headers", ["*"])),
        allow_credentials=getattr(ns, "allow_credentials", False),
        max_concurrent_requests=getattr(ns, "max_concurrent_requests", 1 << 30),
        responses_store_size=getattr(ns, "responses_store_size", 1024),
        batch_dir=getattr(ns, "batch_dir", None),
        max_batch_in_flight=getattr(ns, "max_batch_in_flight", 64),
    )


def _engine_gauges(stats: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    if "num_waiting" in stats:
        out["num_waiting"] = float(stats["num_waiting"])
    for key in ("num_steps", "num_decode_steps", "num_step_seqs", "prefix_cache_queries",
                "prefix_cache_hits"):
        if key in stats:
            out[key] = float(stats[key])
    for key, value in stats.items():  # compiles per backend, the compile caches, drafts
        if key.startswith(("grammar_", "schema_cache_", "spec_decode_")):
            out[key] = float(value)
    total, free = stats.get("num_kv_blocks"), stats.get("num_free_blocks")
    if total:
        out["kv_cache_usage"] = 1.0 - float(free) / float(total)
    return out


def serve(ns: argparse.Namespace) -> None:
    """`thinkgate serve`: load the model, then answer HTTP until interrupted."""
    import uvicorn

    state = build_state(ns)
    if state.config.allowed_origins is not None and "*" in state.config.allowed_origins \
            and not state.config.api_key:
        logger.warning("--allowed-origins allows any origin and no --api-key is set: any web "
                       "page open in a browser on this machine can use this server")
    app = build_app(state)
    # What start-up loaded (transformers, the tokenizer, pydantic models) lives as long as the
    # server: moving it out of the collector's generations keeps full collections short while
    # requests allocate (vLLM's API server does the same).
    gc.collect()
    gc.freeze()
    logger.info("serving %s on http://%s:%d", state.model_name, ns.host, ns.port)
    print(f"thinkgate: serving {state.model_name!r} on http://{ns.host}:{ns.port}/v1", flush=True)
    uvicorn.run(app, host=ns.host, port=ns.port, log_level=ns.uvicorn_log_level,
                timeout_keep_alive=5)
