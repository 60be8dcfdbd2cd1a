"""Benchmarks: `python -m bench` (or `make bench`) runs every `bench_*.py` module's `main()`.

Benchmarks print figures; they are not tests and assert nothing.
"""
