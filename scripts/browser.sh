#!/usr/bin/env bash
# What the browser tests (tests/ui/) need: Debian's chromium (and its driver), and the
# playwright package that drives it through executable_path (no browser is downloaded).
# Idempotent; exits 0 with a note when chromium cannot be installed (the tests then skip
# with that reason).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium for the browser tests (apt-get, about a minute)…" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
      >/tmp/hermes-browser-install.log 2>&1 \
      || echo "scripts/browser.sh: could not install chromium (see /tmp/hermes-browser-install.log); the browser tests will skip"
  else
    echo "scripts/browser.sh: chromium is missing and apt-get is unavailable (not root?); the browser tests will skip"
  fi
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import playwright" 2>/dev/null; then
  .venv/bin/pip install -q 'playwright>=1.40' || echo "scripts/browser.sh: could not install playwright; the browser tests will skip"
fi
exit 0
