"""thinkgate.engine.model."""
