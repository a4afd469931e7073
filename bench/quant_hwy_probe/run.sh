#!/bin/sh
# Portability probe for the Highway quantized kernels (src/backend/cpu/matmul_quant_hwy-inl.h),
# outside the CMake build. Run from the repository root after building build/ (strata_gguf, strata_core).
#  1. Runtime, x86: the kernels compiled by clang for every attainable x86 target (EMU128 — the
#     generic 128-bit code, 8 int16 lanes like NEON — SSSE3, SSE4, AVX2, AVX3, AVX3_DL; GCC 12.2
#     cannot build EMU128, so the CMake build's fallback is SCALAR) and run on each one this CPU
#     supports, against a double reference from the reference dequantizer (max error 2e-5 of the RMS).
#     The kernels' TU is compiled with -Dstrata=strata_probe so its symbols do not clash with the
#     library's.
#  2. Compile only, aarch64 (clang --target, this machine's libstdc++ headers): NEON, and SVE/SVE_256.
set -e
out=${TMPDIR:-/tmp}/strata-quant-hwy-probe
mkdir -p "$out/inc/gnu" "$out/inc/bits"
dir=bench/quant_hwy_probe
clang++ -std=c++20 -O2 -Wall -Wextra -Dstrata=strata_probe -Isrc -I$dir -DHWY_WANT_AVX3_DL -DHWY_COMPILE_ALL_ATTAINABLE \
  -c $dir/probe_kernels.cpp -o "$out/kernels.o"
g++ -std=c++20 -O2 -Isrc -c $dir/probe_main.cpp -o "$out/main.o"
g++ "$out/main.o" "$out/kernels.o" build/src/gguf/libstrata_gguf.a build/src/core/libstrata_core.a -lhwy -lfmt -lspdlog \
  -o "$out/probe"
"$out/probe"
# aarch64 without a sysroot: the x86_64 glibc headers with a 64-bit wordsize stand in.
touch "$out/inc/gnu/stubs-32.h"
printf '#define __WORDSIZE 64\n#define __WORDSIZE_TIME64_COMPAT32 1\n#define __SYSCALL_WORDSIZE 64\n' > "$out/inc/bits/wordsize.h"
for arch in armv8.2-a armv8.2-a+sve; do
  clang++ --target=aarch64-linux-gnu -march=$arch -std=c++20 -O2 -Wall -Wextra -Werror -nostdinc++ -isystem "$out/inc" \
    -isystem /usr/include/c++/12 -isystem /usr/include/x86_64-linux-gnu/c++/12 -isystem /usr/include/x86_64-linux-gnu \
    -Isrc -I$dir -DHWY_COMPILE_ALL_ATTAINABLE -c $dir/probe_kernels.cpp -o "$out/a64.o"
  echo "aarch64 -march=$arch compiled:" $(nm -C "$out/a64.o" | grep -oE 'N_[A-Z0-9_]+::MatmulQuantRowsHwy' | sort -u)
done
