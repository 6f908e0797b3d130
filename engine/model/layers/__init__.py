"""thinkgate.engine.model.layers."""
