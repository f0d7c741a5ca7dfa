#!/usr/bin/env bash
# What the Hermes Agent tests (tests/hermes_agent/) need: the real Hermes Agent, in a venv of its
# own (.venv-hermes), exactly as a Hermes user has it: `hermes-agent[mcp]==0.19.0` from the
# package index, then hermes-redis itself (editable, with its default dependencies: no mcp
# extra), as `pip install hermes-redis` into Hermes' venv puts it (issue 41: `pip check` stays
# clean, Hermes keeps its mcp==1.26.0). Idempotent: a second run does nothing and prints
# nothing. On failure it says so and exits 0: the tests then skip, saying why.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
HERMES_AGENT="hermes-agent[mcp]==0.19.0"
stamp=.venv-hermes/.installed-$(cat pyproject.toml - <<<"$HERMES_AGENT" | cksum | cut -d' ' -f1)
[ -f "$stamp" ] && exit 0
echo "setup: installing $HERMES_AGENT and hermes-redis into .venv-hermes for the Hermes Agent tests (pip, once)…" >&2
started=$SECONDS
log=/tmp/hermes-agent-install.log
if { [ -x .venv-hermes/bin/python ] || "$PYTHON" -m venv .venv-hermes; } >"$log" 2>&1 \
   && .venv-hermes/bin/python -m pip install --disable-pip-version-check --no-input \
        --progress-bar off "$HERMES_AGENT" >>"$log" 2>&1 \
   && .venv-hermes/bin/python -m pip install --disable-pip-version-check --no-input \
        --progress-bar off -e . >>"$log" 2>&1 \
   && .venv-hermes/bin/python -m pip check >>"$log" 2>&1; then
  rm -f .venv-hermes/.installed-*
  touch "$stamp"
  echo "setup: installed $HERMES_AGENT and hermes-redis in $((SECONDS - started)) s (pip check: clean)" >&2
else
  tail -n 5 "$log" >&2
  echo "scripts/hermes_venv.sh: could not install $HERMES_AGENT (see $log); the Hermes Agent tests will skip" >&2
fi
exit 0
