#!/usr/bin/env bash
# Installs Debian's Chromium for the status page's headless-browser test
# (tests/server/status_page_slow_test.cpp, skipped when /usr/bin/chromium is missing). Kept apart
# from install-deps.sh because it is large and only that one test needs it. Idempotent: does
# nothing when the package is already installed.
set -euo pipefail

exec "$(dirname "$0")/apt-install.sh" chromium
