#!/usr/bin/env bash
# One call on the GPU machine: the CUDA tests, then the benchmarks of docs/PERFORMANCE.md, and
# (with PEER=path-to-llama.cpp-source) llama.cpp's CUDA build measured in the same call.
# Run from the checkout through device-run.sh:
#   scripts/cuda/device-run.sh .peers/cuda scripts/cuda/device-check.sh [tests] [bench] [switches] [lazynorm] [peer]
# Logs go to $OUT (or /tmp/strata-out).
set -uo pipefail
out=${OUT:-/tmp/strata-out}
mkdir -p "$out"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests bench)
has() { local s; for s in "${steps[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee "$out/gpu.txt"
peer_pid=
if has peer && [[ -n ${PEER:-} ]]; then
  # llama.cpp's CUDA build in the background (16 cores) while Strata's runs use the GPU.
  bash /work/shared/peers/llama-cpp.sh cuda "$PEER" /tmp/llama-cuda >"$out/peer-build.log" 2>&1 &
  peer_pid=$!
fi
if has tests; then
  for t in $(cd "$(dirname "$(command -v strata)")" && ls | grep '^cuda_'); do
    echo "== $t"
    "$t" 2>&1 | tee "$out/$t.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error|^\[==' | head -40
  done
fi
if has nographs; then
  for t in $(cd "$(dirname "$(command -v strata)")" && ls | grep '^cuda_'); do
    echo "== $t (STRATA_CUDA_GRAPHS=0)"
    STRATA_CUDA_GRAPHS=0 "$t" 2>&1 | tee "$out/$t-nographs.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error|^\[==' | head -40
  done
fi
if has server; then
  # The server's black-box API tests against `strata serve --device cuda`.
  for t in server_server_api_test server_server_errors_test server_server_batching_test server_server_limits_test server_server_lifecycle_test; do
    echo "== $t (--device cuda)"
    STRATA_TEST_DEVICE=cuda STRATA_TEST_BIN="$(command -v strata)" "$t" 2>&1 | tee "$out/$t.log" |
      grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|^\[==' | head -20
  done
fi
if has diag; then
  s=/work/shared/models/stories260K.gguf
  for d in cpu cuda; do
    echo "== generate stories260K --device $d"
    strata generate -m $s --device $d -p "Once upon a time" -n 24 --temperature 0 2>&1 | tail -3
  done
  echo "== generate stories260K --device cuda, no graphs"
  STRATA_CUDA_GRAPHS=0 strata generate -m $s --device cuda -p "Once upon a time" -n 24 --temperature 0 2>&1 | tail -3
fi
model=/tmp/llama-1b-f16.gguf
if has bench || has peer || has profile || has ncu || has switches || has lazynorm; then
  strata gguf make-random --preset llama-1b --dtype f16 --vocab-from /work/shared/tokenizer/ggml-vocab-llama-spm.gguf \
    -o "$model" >/dev/null 2>&1 || echo "make-random failed"
fi
if has profile; then
  { echo "== profile: prefill 512"; STRATA_CUDA_PROFILE=1 strata bench model -m "$model" --device cuda --pp 512 --tg 0 --reps 2 --no-bandwidth;
    echo "== profile: decode B=1"; STRATA_CUDA_PROFILE=1 strata bench model -m "$model" --device cuda --pp 0 --tg 64 --reps 1 --no-bandwidth;
    echo "== profile: decode B=64"; STRATA_CUDA_PROFILE=1 strata bench model -m "$model" --device cuda --pp 0 --tg 32 --batch 64 --reps 1 --no-bandwidth;
  } 2>&1 | tee "$out/profile.log" | grep -v '^| [a-z].* | [0-9]* | 0\.0'
fi
if has ncu; then
  # Per-kernel GPU time (Nsight Compute, clocks left alone) of two decode tokens and one prefill.
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  export STRATA_CUDA_GRAPHS=0
  timeout 200 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    --launch-skip 600 --launch-count 370 strata bench model -m "$model" --device cuda --pp 0 --tg 24 --reps 1 --no-bandwidth \
    >"$out/ncu-decode.txt" 2>&1; echo "ncu decode rc=$?"
  timeout 200 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    --launch-skip 200 --launch-count 200 strata bench model -m "$model" --device cuda --pp 512 --tg 0 --reps 1 --no-bandwidth \
    >"$out/ncu-prefill.txt" 2>&1; echo "ncu prefill rc=$?"
  unset STRATA_CUDA_GRAPHS
  grep -E '^  [a-zA-Z_].*\(|gpu__time_duration.sum' "$out/ncu-decode.txt" | paste - - | awk '{print}' | head -40
fi
if [[ -n $peer_pid ]]; then  # benchmarks on a quiet machine: the peer's build first
  wait "$peer_pid"; tail -3 "$out/peer-build.log"; peer_pid=built
fi
if has bench; then
  { echo "== bench model pp512/tg128"; strata bench model -m "$model" --device cuda --pp 512 --tg 128 --reps 3;
    for b in 8 64; do echo "== bench model B=$b"; strata bench model -m "$model" --device cuda --pp 0 --tg 128 --batch $b --reps 2 --no-bandwidth; done
    echo "== bench offline 256x(128+128)"; strata bench offline -m "$model" --device cuda --num-prompts 256 --input-len 128 --output-len 128 --seed 1;
    strata gguf quantize "$model" --type q4_k -o /tmp/llama-1b-q4_k.gguf >/dev/null 2>&1 || echo "quantize failed"
    echo "== bench model Q4_K pp512/tg128"; strata bench model -m /tmp/llama-1b-q4_k.gguf --device cuda --pp 512 --tg 128 --reps 3;
  } 2>&1 | tee "$out/bench.log"
fi
if has switches; then
  # The decode/prefill switches one at a time against the defaults (docs/PERFORMANCE.md, A/B).
  { for sw in "" STRATA_CUDA_FUSED_ATTN=0 STRATA_CUDA_PDL=0 STRATA_CUDA_GEMV_SPLIT=1 STRATA_CUDA_MMA_ATTN=0; do
      echo "== switch: ${sw:-defaults}"
      env $sw strata bench model -m "$model" --device cuda --pp 512 --tg 128 --reps 3 --no-bandwidth
      [[ $sw == STRATA_CUDA_FUSED_ATTN=0 || -z $sw ]] && env $sw strata bench model -m "$model" --device cuda --pp 0 --tg 128 --batch 8 --reps 2 --no-bandwidth
    done
  } 2>&1 | tee "$out/switches.log" | grep -E '^==|pp512|tg128'
fi
if has lazynorm; then
  # The lazy norm of decode steps (issue 11, brief h11f): its tests, then STRATA_CUDA_LAZY_NORM=0
  # against =1, interleaved, F16 and Q4_K, B = 1, 8, 64 (64 takes cuBLAS: the switch must not matter).
  { echo "== lazy norm: op test"; cuda_cuda_backend_ops_test --gtest_filter='*LazyNorm*:*MatmulSiluMul*:*MatmulEveryWeightType*' 2>&1 | tail -4
    echo "== lazy norm: stories260K references"; cuda_cuda_model_test --gtest_filter='*Stories260K*' 2>&1 | tail -4
    for v in 0 1; do echo "== generate stories260K STRATA_CUDA_LAZY_NORM=$v"
      STRATA_CUDA_LAZY_NORM=$v strata generate -m /work/shared/models/stories260K.gguf --device cuda -p "Once upon a time" -n 24 --temperature 0 2>&1 | tail -2; done
    [[ -f /tmp/llama-1b-q4_k.gguf ]] || strata gguf quantize "$model" --type q4_k -o /tmp/llama-1b-q4_k.gguf >/dev/null 2>&1 || echo "quantize failed"
    for m in "$model" /tmp/llama-1b-q4_k.gguf; do
      for v in 0 1 0 1; do
        echo "== lazy norm $v $(basename "$m") B=1"; STRATA_CUDA_LAZY_NORM=$v strata bench model -m "$m" --device cuda --pp 0 --tg 128 --reps 3
      done
      for b in 8 64; do for v in 0 1; do
        echo "== lazy norm $v $(basename "$m") B=$b"; STRATA_CUDA_LAZY_NORM=$v strata bench model -m "$m" --device cuda --pp 0 --tg 128 --batch $b --reps 2 --no-bandwidth
      done; done
    done
    echo "== lazy norm: per-op profile, decode B=1 (graphs off)"
    STRATA_CUDA_LAZY_NORM=1 STRATA_CUDA_PROFILE=1 strata bench model -m "$model" --device cuda --pp 0 --tg 64 --reps 1 --no-bandwidth
  } 2>&1 | tee "$out/lazynorm.log" | grep -E '^==|tg128|PASSED|FAILED|Failure|gemv|add_rms|norm'
fi
if [[ $peer_pid == built ]]; then
  b=/tmp/llama-cuda/bin
  { echo "== llama-bench"; $b/llama-bench -m "$model" -p 512 -n 128 -fa 1 -ngl 99;
    [[ -f /tmp/llama-1b-q4_k.gguf ]] && $b/llama-bench -m /tmp/llama-1b-q4_k.gguf -p 512 -n 128 -fa 1 -ngl 99;
    echo "== llama-batched-bench"; $b/llama-batched-bench -m "$model" -c 66000 -npp 128 -ntg 128 -npl 1,8,32,64,128,256 -fa -ngl 99;
  } 2>&1 | tee "$out/peer.log" | grep -v '^llama_\|^load\|^print_info\|^ggml_\|^main:\|^build' | tail -30
fi
