"""Where the bundled models live: the demo model (the default of every entry point) and the
tiny reasoning model, each also reachable by name (`BUNDLED_MODELS`)."""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"
REASONER_MODEL_DIR = Path(__file__).resolve().parent / "reasoner"
# names a model argument may give instead of a folder (a folder of that name wins)
BUNDLED_MODELS = {"thinkgate-demo": DEMO_MODEL_DIR, "thinkgate-reasoner": REASONER_MODEL_DIR}


def _checked(folder: Path, what: str) -> str:
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"the bundled {what} is missing at {folder}; "
            "retrain it as benchmarks/training/README.md says"
        )
    return str(folder)


def demo_model_path() -> str:
    """The folder of the bundled demo model: a tiny Qwen3-architecture chat model."""
    return _checked(DEMO_MODEL_DIR, "demo model")


def reasoner_model_path() -> str:
    """The folder of the bundled reasoning model: the demo model's size and tokenizer, trained
    to think a sentence per step (more for longer questions, fewer at low reasoning effort)."""
    return _checked(REASONER_MODEL_DIR, "reasoning model")


def bundled_model_path(name: str) -> str | None:
    """The folder of the bundled model called `name` ("thinkgate-demo", "thinkgate-reasoner"),
    or None when no bundled model has that name."""
    folder = BUNDLED_MODELS.get(name)
    return None if folder is None else _checked(folder, f"model {name!r}")
