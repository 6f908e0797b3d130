"""thinkgate.engine.core."""
