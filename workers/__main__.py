"""``python -m workers [--burst]``: the same as ``hermes-redis worker``."""

import sys

from hermes_redis.errors import HermesError
from hermes_redis.session_memory import SessionMemory
from workers.worker import run

if __name__ == "__main__":
    try:
        run(SessionMemory.from_config(), burst="--burst" in sys.argv[1:])
    except HermesError as err:  # expected errors: one line, no traceback (invariant 7)
        print(f"Error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(err.exit_code)
