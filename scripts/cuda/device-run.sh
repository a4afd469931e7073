#!/usr/bin/env bash
# Runs COMMAND on a GPU machine with a bundle made by scripts/cuda/bundle.sh: unpacks its
# libraries, puts the CUDA toolkit's and the driver's libraries on the library path, and makes
# the paths the test programs were built with (/work/main, /work/shared) point at this checkout
# and the bundle's copy of ../shared.
#   scripts/cuda/device-run.sh BUNDLE COMMAND...      e.g. device-run.sh .peers/cuda strata --help
set -euo pipefail
bundle=$(cd "$1" && pwd); shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [[ ! -d $bundle/bin ]]; then
  if [[ -f $bundle/bundle.txz ]]; then tar xJf "$bundle/bundle.txz" -C "$bundle"; else tar xzf "$bundle/bundle.tgz" -C "$bundle"; fi
fi
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bundle/bin:$PATH"
mkdir -p /work
[[ -e /work/main ]] || ln -sfn "$repo" /work/main  # -e is false for a link left dangling by an earlier call
[[ -e /work/shared ]] || ln -sfn "$bundle/shared" /work/shared
"$@"
