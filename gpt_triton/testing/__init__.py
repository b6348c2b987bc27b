"""Helpers for tests, examples and benchmarks: model builders that need no download."""
