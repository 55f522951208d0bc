"""Benchmark and load tooling, shared by ``make bench`` and the integration tests."""
