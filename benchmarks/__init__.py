"""Benchmarks of the recipe; run each from the repository root as ``python -m benchmarks.<name>``."""
