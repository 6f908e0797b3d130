"""thinkgate.kernels."""
