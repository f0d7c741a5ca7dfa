"""``python -m hermes_redis.cli``: the ``hermes-redis`` command."""

from hermes_redis.cli.main import main

main()
