#!/usr/bin/env bash
# Installs exactly the Debian packages Strata's build and tests need. Idempotent: does nothing when
# every package is already present.
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  libcpp-httplib-dev libboost-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libxxhash-dev libhwy-dev libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools libhiredis-dev
  clang libfuzzer-14-dev libclang-rt-14-dev
)

exec "$(dirname "$0")/apt-install.sh" "${packages[@]}"
