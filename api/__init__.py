"""thinkgate.api."""
