#!/usr/bin/env bash
# Installs what the tests need beyond the Debian packages of `install-deps.sh --dev`: the official
# `openai` npm client used by tests/server/openai_node_test.cpp. Idempotent: does nothing when it
# is already installed. Uses the machine's Node.js (>= 18) and npm, or Debian's when there are none.
set -euo pipefail

cd "$(dirname "$0")/.."
dir=tests/server/node

if [ -f "$dir/node_modules/openai/package.json" ]; then
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  scripts/apt-install.sh nodejs npm
fi
echo "install-test-deps: installing the openai npm client into $dir" >&2
if [ -f "$dir/package-lock.json" ]; then
  # The versions the lock file pins.
  npm ci --prefix "$dir" --no-audit --no-fund
else
  npm install --prefix "$dir" --no-audit --no-fund openai@4
fi
