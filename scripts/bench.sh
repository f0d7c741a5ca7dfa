#!/usr/bin/env bash
# Run the benchmarks: bash scripts/bench.sh [--quick] [--only SECTION ...] [--no-write]
#
# Uses (and on first run creates) the bench venv .venv-bench with the project installed
# editable plus the peer libraries of bench/requirements.txt. The benchmark starts its own
# private redis-server on a free port; it never touches a Redis you already run.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${HERMES_BENCH_VENV:-.venv-bench}"
PYTHON="${PYTHON:-python3}"
stamp="$VENV/.installed"
want="$(cat pyproject.toml bench/requirements.txt | sha1sum | cut -d' ' -f1)"

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV (first run only)…" >&2
  "$PYTHON" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "installing hermes-redis and the benchmark peers into $VENV…" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e .
  if "$VENV/bin/python" -m pip install -q -r bench/requirements.txt; then
    echo "$want" > "$stamp"
  else
    echo "warning: could not install the peer libraries; their rows will say 'skipped'" >&2
  fi
fi

exec "$VENV/bin/python" -m bench "$@"
