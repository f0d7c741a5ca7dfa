"""Benchmarks for hermes-redis: ``bash scripts/bench.sh`` (see docs/benchmarks.md)."""
