"""Benchmark: provgraph against the cost of looking at the files (``python -m tests.bench``)."""
