"""Helpers for tests and benchmarks that run real broker processes."""
