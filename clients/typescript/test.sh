#!/usr/bin/env bash
# The TypeScript client's whole check, from a clean clone: install the locked devDependencies
# (`npm ci`, skipped while node_modules holds exactly package-lock.json), build, then run the
# tests (node --test) against real `hermes-redis serve` processes that the tests start, the
# schema drift check among them (test/schema.test.ts). Prints a dot per test, the failures in
# full, and one summary line; the whole TAP report is left in build/test-report.tap.
#
# Needs Node >= 18 and the Python side set up (`bash scripts/setup.sh` at the repo root, or
# HERMES_PYTHON pointing at a Python with hermes-redis installed).
set -euo pipefail
export NPM_CONFIG_UPDATE_NOTIFIER=false  # no "npm notice" about a newer npm
cd "$(dirname "$0")"
lock=$(cksum < package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.installed-lock 2>/dev/null)" != "$lock" ]; then
  echo "npm ci (the locked devDependencies)…"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  echo "$lock" > node_modules/.installed-lock
fi
npm run --silent build
npm run --silent build:test
started=$SECONDS
status=0
# the same run as `npm test` (package.json), with a dot reporter on the terminal
node --test --test-concurrency=1 --test-reporter=dot --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination=build/test-report.tap build/test/ || status=$?
count() { sed -n "s/^# $1 \([0-9]*\)$/\1/p" build/test-report.tap | tail -n 1; }
echo "TypeScript client: $(count tests) tests, $(count pass) passed, $(count fail) failed," \
  "$(count skipped) skipped in $((SECONDS - started)) s"
exit "$status"
