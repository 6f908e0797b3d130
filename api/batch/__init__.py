"""Batch runs: offline `run-batch` (one machine or Ray) over the server's app in-process."""
