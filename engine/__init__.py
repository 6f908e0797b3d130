"""thinkgate.engine."""
