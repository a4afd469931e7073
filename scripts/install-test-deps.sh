#!/usr/bin/env bash
# Installs what the tests need beyond the Debian packages of install-deps.sh: the official `openai`
# npm client used by tests/server/openai_node_test.cpp. Idempotent: does nothing when it is already
# installed. Needs Node.js (>= 18) and npm.
set -euo pipefail

cd "$(dirname "$0")/.."
dir=tests/server/node

if [ -f "$dir/node_modules/openai/package.json" ]; then
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-test-deps: Node.js and npm are needed for the OpenAI client test" >&2
  exit 1
fi
echo "install-test-deps: installing the openai npm client into $dir" >&2
if [ -f "$dir/package-lock.json" ]; then
  # The versions the lock file pins.
  npm ci --prefix "$dir" --no-audit --no-fund
else
  npm install --prefix "$dir" --no-audit --no-fund openai@4
fi
