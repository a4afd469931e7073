#!/usr/bin/env bash
# Installs Debian's Chromium for the status page's headless-browser test
# (tests/server/status_page_slow_test.cpp, skipped when /usr/bin/chromium is missing). Kept apart
# from install-deps.sh because it is large and only that one test needs it. Idempotent: does
# nothing when the package is already installed.
set -euo pipefail

packages=(chromium)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-browser-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
