"""Benchmarks, run as scripts: `.venv/bin/python bench/domain.py`."""
