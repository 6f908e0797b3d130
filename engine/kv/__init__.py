"""thinkgate.engine.kv."""
