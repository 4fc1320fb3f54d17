"""Maintenance tools; run each from the repository root as ``python -m tools.<name>``."""
