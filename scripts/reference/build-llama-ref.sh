#!/usr/bin/env bash
# Builds the outside-reference tools from a llama.cpp source tree (release b4748, commit c392e50,
# exported with ../shared/peers/llama-cpp.sh export): static, portable x86-64 (AVX2, no AVX-512,
# so that every machine here computes the same sums), single binaries that run on any machine here.
#   build-llama-ref.sh LLAMA_SRC OUTDIR   -> OUTDIR/bin/{llama_ref,llama-quantize,llama-perplexity}
set -euo pipefail
src=$(realpath "$1") out=$2
here=$(cd "$(dirname "$0")" && pwd)
cmake -S "$here" -B "$out" -DLLAMA_SRC="$src" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_OPENMP=OFF -DGGML_STATIC=ON -DCMAKE_EXE_LINKER_FLAGS=-static -DGGML_AVX=ON -DGGML_AVX2=ON \
  -DGGML_FMA=ON -DGGML_F16C=ON -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$(realpath -m "$out")/bin" >/dev/null
cmake --build "$out" -j"$(nproc)" --target llama_ref llama-quantize llama-perplexity llama-cli >"$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
ls "$out/bin"
