"""Benchmarks, run as modules: ``python -m bench.loop_overhead``."""
