"""thinkgate.benchmarks."""
