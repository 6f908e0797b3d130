"""Where the bundled models live: the demo model (the default of every entry point) and the
tiny reasoning model (`thinkgate serve` it by path, or `demo_reasoner_path()`)."""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"
DEMO_REASONER_DIR = Path(__file__).resolve().parent / "reasoner"


def demo_model_path() -> str:
    """The folder of the bundled demo model: a tiny Qwen3-architecture chat model."""
    if not (DEMO_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the bundled demo model is missing at {DEMO_MODEL_DIR}; "
            "rebuild it with `python -m thinkgate.engine.demo.build`"
        )
    return str(DEMO_MODEL_DIR)


def demo_reasoner_path() -> str:
    """The folder of the bundled tiny reasoning model (Qwen3 architecture, thinks before it
    answers; qwen3 reasoning and hermes tool calls)."""
    if not (DEMO_REASONER_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the bundled reasoning model is missing at {DEMO_REASONER_DIR}; rebuild it with "
            "`python -m thinkgate.benchmarks.training.train --model reasoner`"
        )
    return str(DEMO_REASONER_DIR)
