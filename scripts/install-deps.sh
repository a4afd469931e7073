#!/usr/bin/env bash
# Installs the Debian packages Strata needs that are missing (scripts/apt-install.sh: apt-get,
# through sudo when not root; nothing, and no network, when every package is present).
#   scripts/install-deps.sh         what building and running `strata` needs (`make run`)
#   scripts/install-deps.sh --dev   that, and what the test, benchmark, sanitizer and fuzz builds
#                                   need: GoogleTest, Google Benchmark, a Redis server for the
#                                   remote-tier tests, clang and libFuzzer (`make test`)
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  libcpp-httplib-dev libboost-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libxxhash-dev libhwy-dev libicu-dev libhiredis-dev
)
dev_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools
  clang libfuzzer-14-dev libclang-rt-14-dev
)

case "${1:-}" in
  "") ;;
  --dev) packages+=("${dev_packages[@]}") ;;
  *) echo "install-deps.sh: unknown argument '$1' (expected nothing or --dev)" >&2; exit 2 ;;
esac

exec "$(dirname "$0")/apt-install.sh" "${packages[@]}"
