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


def is_bundled_name(model: str) -> bool:
    """Whether a model argument names a bundled model: one of `BUNDLED_MODELS` that is not also
    a path that exists (a folder or file called `thinkgate-demo` wins over the name)."""
    return model in BUNDLED_MODELS and not Path(model).expanduser().exists()


def bundled_model_path(name: str) -> str | None:
    """The folder of the bundled model called `name` ("thinkgate-demo", "thinkgate-reasoner"),
    or None when `name` is not a bundled name (`is_bundled_name`)."""
    if not is_bundled_name(name):
        return None
    return _checked(BUNDLED_MODELS[name], f"model {name!r}")
