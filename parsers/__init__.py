"""thinkgate.parsers."""
