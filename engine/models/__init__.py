"""thinkgate.engine.models."""
