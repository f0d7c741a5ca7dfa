#!/usr/bin/env bash
# Set everything up and run hermes-redis on the embedded default (a private Redis under
# ~/.hermes/data, no service to install).
#   scripts/run.sh            the demo (scripts/demo.py): a conversation archived and compacted,
#                             the context at 2,000 tokens as its parts, recall, a memory, /info
#   scripts/run.sh serve      the HTTP API on 127.0.0.1:8080 AND a worker (archiving and
#                             compaction run without a second terminal); Ctrl-C stops both
#   scripts/run.sh worker     the long-running worker that archives and compacts sessions
#   scripts/run.sh ARGS...    any hermes-redis command, e.g. scripts/run.sh session list
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
  exec .venv/bin/python scripts/demo.py
fi
if [ "$1" = "serve" ]; then
  # A bad config or an unreachable Redis: one Error line from here, not one from the worker
  # and another from the server.
  .venv/bin/hermes-redis --config config.yml session list --limit 1 >/dev/null || exit $?
  .venv/bin/hermes-redis --config config.yml worker &
  worker=$!
  trap 'kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
  .venv/bin/hermes-redis --config config.yml "$@"
  exit $?
fi
exec .venv/bin/hermes-redis --config config.yml "$@"
