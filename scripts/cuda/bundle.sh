#!/usr/bin/env bash
# Packs what a GPU machine without apt needs to run this build of Strata (the device machine of
# docs/PERFORMANCE.md): the strata binary, the CUDA test programs, the Debian shared libraries
# they link (not glibc/libstdc++, which the target's newer system provides; not cuBLAS/cudart,
# which come with its CUDA toolkit under /usr/local/cuda/lib64), and the ../shared files the
# tests read. Writes DEST (default .peers/cuda, which .git/info/exclude keeps out of git).
#   scripts/cuda/bundle.sh [BUILD_DIR] [DEST]      (NO_TESTS=1: strata alone, for benchmark calls
#                                                   that carry a peer's source beside it; EXTRA="a b":
#                                                   more programs, e.g. a server test and redis-server;
#                                                   NO_STRATA=1: without strata itself)
# Then, on the GPU machine, from the checkout: scripts/cuda/device-run.sh DEST COMMAND...
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build} dest=${2:-.peers/cuda}
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib" "$dest/shared/models" "$dest/shared/tokenizer" "$dest/shared/reference"
bins=()
[[ ${NO_STRATA:-0} == 1 ]] || bins+=("$build/bin/strata")  # NO_STRATA=1: test programs only (the carry limit)
if [[ ${NO_TESTS:-0} != 1 ]]; then
  for t in "$build"/tests/cuda_* "$build"/tests/server_server_{api,errors,batching,limits,lifecycle}_test; do
    [[ -x $t ]] && bins+=("$t")
  done
fi
# EXTRA: more programs to carry (a test binary not listed above, redis-server for the remote tier).
for b in ${EXTRA:-}; do bins+=("$b"); done
for b in "${bins[@]}"; do strip -o "$dest/bin/$(basename "$b")" "$b"; done
# Shared libraries outside glibc/libstdc++/the CUDA toolkit.
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$dest/lib/"; done
# One compressed archive of bin/ and lib/ (the device call carries at most 64 MiB). xz with a
# dictionary larger than one program stores the device code that every program links once: strata
# and every CUDA and server test program take ~53 MB so, where gzip made 40 MB of strata alone.
tar cf - -C "$dest" bin lib | xz -T1 --lzma2=preset=3,dict=192MiB > "$dest/bundle.txz" && rm -rf "$dest/lib" "$dest/bin"
cp ../shared/README.md "$dest/shared/"  # a file that is not GGUF, for the server's error tests
cp ../shared/models/stories260K.gguf "$dest/shared/models/"
cp ../shared/tokenizer/ggml-vocab-llama-spm.gguf "$dest/shared/tokenizer/"
cp ../shared/reference/* "$dest/shared/reference/"
mkdir -p "$dest/shared/peers" && cp ../shared/peers/llama-cpp.sh "$dest/shared/peers/"
du -sh "$dest"
