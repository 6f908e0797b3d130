"""Prometheus metrics: requests, tokens, queue, time to first token, inter-token latency.

Each app owns its own registry (two servers in one process do not clash). Names follow vLLM's
metrics with a `thinkgate_` prefix.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class ServerMetrics:
    """The server's counters and histograms; `observe_*` are called by the endpoints."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name}
        self._labels = labels
        self.requests = Counter(
            "thinkgate_requests", "HTTP requests by endpoint and status code",
            ["endpoint", "status"], registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "thinkgate_prompt_tokens", "Prompt tokens processed", ["model_name"],
            registry=self.registry,
        ).labels(**labels)
        self.generation_tokens = Counter(
            "thinkgate_generation_tokens", "Tokens generated", ["model_name"],
            registry=self.registry,
        ).labels(**labels)
        self.finished = Counter(
            "thinkgate_request_success", "Finished generations by finish reason",
            ["model_name", "finished_reason"], registry=self.registry,
        )
        self.running = Gauge(
            "thinkgate_num_requests_running", "Generation requests in flight on the server",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.waiting = Gauge(
            "thinkgate_num_requests_waiting", "Requests queued in the engine scheduler",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.kv_usage = Gauge(
            "thinkgate_kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0..1)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.steps = Gauge(
            "thinkgate_engine_steps", "Forward passes the engine has run (cumulative)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.decode_steps = Gauge(
            "thinkgate_engine_decode_steps", "Of those, decode passes (the rest prefill)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.step_seqs = Gauge(
            "thinkgate_engine_step_sequences", "Sequences those passes carried, summed "
            "(cumulative; divided by thinkgate_engine_steps: the mean batch)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.rejected = Counter(
            "thinkgate_requests_rejected", "Requests refused with 429 (queue full)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.ttft = Histogram(
            "thinkgate_time_to_first_token_seconds", "Time from arrival to the first token",
            ["model_name"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        ).labels(**labels)
        self.itl = Histogram(
            "thinkgate_inter_token_latency_seconds", "Time between consecutive output chunks "
            "divided by the tokens they carry", ["model_name"], buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self.e2e = Histogram(
            "thinkgate_e2e_request_latency_seconds", "Time from arrival to the last token",
            ["model_name"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        ).labels(**labels)
        # engine totals in tokens, as counters (vLLM's prefix_cache_queries / prefix_cache_hits)
        self.prefix_queries = Counter(
            "thinkgate_prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.prefix_hits = Counter(
            "thinkgate_prefix_cache_hits", "Of those, tokens whose KV the prefix cache served",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.grammar_compiles = Counter(
            "thinkgate_structured_output_compiles", "Constraints compiled, by the grammar "
            "backend that compiled them (structured_outputs_backend: auto picks per constraint)",
            ["model_name", "backend"], registry=self.registry,
        )
        self.grammar_cache = Gauge(
            "thinkgate_grammar_cache_entries", "Compiled constraints held in the compile cache",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.grammar_cache_hits = Counter(
            "thinkgate_grammar_cache_hits", "Constraints served by the compile cache (the same "
            "schema or tool set again, tools in any order)", ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.schema_cache = Gauge(
            "thinkgate_schema_cache_entries", "Distinct schemas (response formats, each tool's "
            "parameters) whose canonical form is kept", ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.schema_cache_hits = Counter(
            "thinkgate_schema_cache_hits", "Schemas (a tool's parameters among them) found "
            "already worked out when a constraint was built", ["model_name"],
            registry=self.registry,
        ).labels(**labels)
        # speculative decoding (engine/core/speculative.py), vLLM's spec_decode_* counters
        self.spec_drafts = Counter(
            "thinkgate_spec_decode_num_drafts", "Drafts verified (a row's draft in one step)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.spec_draft_tokens = Counter(
            "thinkgate_spec_decode_num_draft_tokens", "Draft tokens verified", ["model_name"],
            registry=self.registry,
        ).labels(**labels)
        self.spec_accepted = Counter(
            "thinkgate_spec_decode_num_accepted_tokens", "Of those, tokens kept: each was the "
            "sample of its position", ["model_name"], registry=self.registry,
        ).labels(**labels)
        # per finished request (each sample that verified a draft): count and sums, so a
        # scraper divides for the mean acceptance rate and accepted length per request
        self.spec_requests = Gauge(
            "thinkgate_spec_decode_requests", "Finished requests (samples) that verified a "
            "draft (cumulative)", ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.spec_rate_sum = Gauge(
            "thinkgate_spec_decode_request_acceptance_rate_sum", "Sum over those requests of "
            "each one's draft tokens kept / verified (divide by thinkgate_spec_decode_requests)",
            ["model_name"], registry=self.registry,
        ).labels(**labels)
        self.spec_length_sum = Gauge(
            "thinkgate_spec_decode_request_mean_accepted_length_sum", "Sum over those requests "
            "of each one's tokens per verified draft, the sampled one included (vLLM's mean "
            "acceptance length; divide by thinkgate_spec_decode_requests)", ["model_name"],
            registry=self.registry,
        ).labels(**labels)
        self._engine_totals: dict[str, float] = {}
        self._engine_stats: Callable[[], dict[str, float]] | None = None

    def watch_engine(self, stats: Callable[[], dict[str, float]]) -> None:
        """Read `num_waiting` / `kv_cache_usage` from the engine at every scrape."""
        self._engine_stats = stats

    def render(self) -> bytes:
        if self._engine_stats is not None:
            stats = self._engine_stats()
            if "num_waiting" in stats:
                self.waiting.set(stats["num_waiting"])
            if "kv_cache_usage" in stats:
                self.kv_usage.set(stats["kv_cache_usage"])
            if "num_steps" in stats:
                self.steps.set(stats["num_steps"])
                self.step_seqs.set(stats["num_step_seqs"])
                self.decode_steps.set(stats.get("num_decode_steps", 0))
            for key, counter in (("prefix_cache_queries", self.prefix_queries),
                                 ("prefix_cache_hits", self.prefix_hits),
                                 ("grammar_cache_hits", self.grammar_cache_hits),
                                 ("schema_cache_hits", self.schema_cache_hits),
                                 ("spec_decode_num_drafts", self.spec_drafts),
                                 ("spec_decode_num_draft_tokens", self.spec_draft_tokens),
                                 ("spec_decode_num_accepted_tokens", self.spec_accepted)):
                total = stats.get(key, 0)
                counter.inc(max(0, total - self._engine_totals.get(key, 0)))
                self._engine_totals[key] = total
            for key, total in stats.items():
                if key.startswith("grammar_compiles_"):
                    backend = key.removeprefix("grammar_compiles_")
                    self.grammar_compiles.labels(model_name=self._labels["model_name"],
                                                 backend=backend).inc(
                        max(0, total - self._engine_totals.get(key, 0)))
                    self._engine_totals[key] = total
            if "spec_decode_num_requests" in stats:
                self.spec_requests.set(stats["spec_decode_num_requests"])
                self.spec_rate_sum.set(stats["spec_decode_request_acceptance_rate_sum"])
                self.spec_length_sum.set(stats["spec_decode_request_mean_accepted_length_sum"])
            if "grammar_cache_entries" in stats:
                self.grammar_cache.set(stats["grammar_cache_entries"])
                self.schema_cache.set(stats.get("schema_cache_entries", 0))
        return generate_latest(self.registry)

    def finish(self, reason: str | None) -> None:
        self.finished.labels(model_name=self._labels["model_name"],
                             finished_reason=reason or "abort").inc()


class RequestTimer:
    """Times one request's tokens: first token, then the gaps between later outputs."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.start = time.perf_counter()
        self.last: float | None = None

    def tokens(self, num_new: int) -> None:
        if num_new <= 0:
            return
        now = time.perf_counter()
        if self.last is None:
            self.metrics.ttft.observe(now - self.start)
        else:
            gap = (now - self.last) / num_new
            for _ in range(min(num_new, 64)):
                self.metrics.itl.observe(gap)
        self.last = now
        self.metrics.generation_tokens.inc(num_new)

    def done(self) -> None:
        self.metrics.e2e.observe(time.perf_counter() - self.start)
