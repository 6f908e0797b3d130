"""thinkgate.parsers.formats."""
