"""``python -m workers [--burst]``: the same as ``hermes-redis worker``."""

import sys

from hermes_redis.session_memory import SessionMemory
from workers.worker import run

if __name__ == "__main__":
    run(SessionMemory.from_config(), burst="--burst" in sys.argv[1:])
