#!/usr/bin/env bash
# Set everything up and run hermes-redis on the embedded default (a private Redis under
# ~/.hermes/data, no service to install).
#   scripts/run.sh            a demo conversation: append, archive, compact, context, search
#   scripts/run.sh worker     the long-running worker that archives and compacts sessions
#   scripts/run.sh ARGS...    any hermes-redis command, e.g. scripts/run.sh session list
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
  exec .venv/bin/python scripts/demo.py
fi
exec .venv/bin/hermes-redis --config config.yml "$@"
