"""Errors the engine's clients raise (no torch import: the API process checks them cheaply)."""

from __future__ import annotations


class EngineDeadError(RuntimeError):
    """The engine's step loop failed or its process exited; it serves no more requests."""
