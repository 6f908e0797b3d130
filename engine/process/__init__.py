"""thinkgate.engine.process."""
