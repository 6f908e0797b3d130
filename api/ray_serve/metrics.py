"""/metrics for a Ray Serve deployment: every replica's series, each with a `replica` label.

Each replica keeps its own Prometheus registry (`api/metrics.py`) and posts its rendered text to
the deployment's `MetricsBoard` (a Serve deployment-scoped actor) every few seconds and on every
scrape; whichever replica answers `/metrics` merges the board's texts. A replica that stops
posting (it died) drops out after `MAX_AGE_S`. The deployment's totals are Prometheus sums:
`sum without (replica) (thinkgate_generation_tokens_total)`.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

BOARD_NAME = "thinkgate_metrics"
MAX_AGE_S = 15.0


class MetricsBoard:
    """replica id → (posted at, its /metrics text); Serve runs one per deployment."""

    def __init__(self) -> None:
        self.texts: dict[str, tuple[float, str]] = {}

    def post(self, replica: str, text: str) -> None:
        self.texts[replica] = (time.monotonic(), text)

    def drop(self, replica: str) -> None:
        self.texts.pop(replica, None)

    def fresh(self) -> dict[str, str]:
        now = time.monotonic()
        self.texts = {r: (at, t) for r, (at, t) in self.texts.items() if now - at < MAX_AGE_S}
        return {r: t for r, (_, t) in self.texts.items()}


def merge_expositions(texts: dict[str, str]) -> str:
    """Prometheus text expositions, one per replica → one, each sample labelled `replica`."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(
                family.name, (family.documentation, family.type, []))
            for sample in family.samples:
                labels = {**sample.labels, "replica": replica}
                inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                lines.append(f"{sample.name}{{{inner}}} {_number(sample.value)}")
    out = []
    for name, (doc, kind, lines) in families.items():
        out += [f"# HELP {name} {_escape_help(doc)}", f"# TYPE {name} {kind}", *lines]
    return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
