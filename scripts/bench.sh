#!/usr/bin/env bash
# Run the benchmarks: bash scripts/bench.sh [--quick] [--only SECTION ...] [--no-write]
#
# Uses (and on first run creates) the bench venv .venv-bench with the project installed
# editable plus the peer libraries of bench/requirements.txt. The benchmark starts its own
# private redis-server on a free port; it never touches a Redis you already run.
# See docs/benchmarks.md for what each number means.
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
  log="$VENV/install.log"
  : > "$log"
  pip_q() { "$VENV/bin/python" -m pip install -q "$@" >>"$log" 2>&1; }
  echo "installing hermes-redis and the benchmark peers into $VENV (log: $log)…" >&2
  pip_q --upgrade pip || true
  if ! pip_q -e ".[postgres,semantic]"; then
    tail -n 20 "$log" >&2
    echo "error: could not install hermes-redis into $VENV; see $log" >&2
    exit 1
  fi
  if pip_q -r bench/requirements.txt; then
    echo "$want" > "$stamp"
  else
    echo "warning: could not install the peer libraries (see $log); their rows will say 'skipped'" >&2
  fi
fi

exec "$VENV/bin/python" -m bench "$@"
