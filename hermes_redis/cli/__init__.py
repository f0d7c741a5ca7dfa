"""The ``hermes-redis`` command line: a thin click skin over ``SessionMemory``."""

from hermes_redis.cli.main import cli, main

__all__ = ["cli", "main"]
