"""`AsyncLLMEngine` where the README imports it from; the class lives in the process room
(engine/process/async_engine.py)."""

from thinkgate.engine.process.async_engine import AsyncLLMEngine

__all__ = ["AsyncLLMEngine"]
