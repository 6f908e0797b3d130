"""thinkgate.kernels.cpu: the CPU path of `sample` (kernels/README.md, "The CPU sampler")."""
