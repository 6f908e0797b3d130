"""Where the bundled demo model lives (the default of every entry point)."""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"


def demo_model_path() -> str:
    """The folder of the bundled demo model: a tiny Qwen3-architecture chat model."""
    if not (DEMO_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the bundled demo model is missing at {DEMO_MODEL_DIR}; "
            "retrain it as benchmarks/training/README.md says"
        )
    return str(DEMO_MODEL_DIR)
