#!/usr/bin/env bash
# Writes the llama.cpp reference data that tests/model/llama_reference_test.cpp compares against:
# for two small random-weight models (a Qwen2 shape: NEOX rope, QKV biases, tied embeddings; a
# Llama-3 shape: rope_freqs scaling, GQA 4:1, tied embeddings), made by `strata gguf make-random`:
#   tests/data/reference/<model>/digests-<type>.json   llama-quantize --pure's tensors (XXH3-128 each)
#   tests/data/reference/<model>/greedy-<type>.jsonl   llama.cpp's prompt tokens, greedy tokens and
#                                                      top-8 logits of every step (llama_ref)
# for type f16 (the file itself), q8_0, q4_k and q6_k; and digests only of bf16, q4_0, q4_1, q5_0,
# q5_1, q2_k, q3_k and q5_k for the Llama-3 shape.
#   make_model_refs.sh STRATA_BIN LLAMA_BIN_DIR SHARED_DIR
# LLAMA_BIN_DIR holds llama_ref and llama-quantize built by build-llama-ref.sh from llama.cpp b4748
# (commit c392e50), AVX2 static build.
set -euo pipefail
strata=$(realpath "$1") lbin=$(realpath "$2") shared=$(realpath "$3")
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

n_predict=24
top_k=8
# The long prompt puts positions past 400, where Llama-3's rope_freqs scaling of the slow dimensions
# changes the logits measurably.
paragraph="The old lighthouse keeper climbed the spiral stairs every evening, counting the steps, \
listening to the waves below and writing the weather into a worn blue notebook. "
long_prompt=""
for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do long_prompt+=$paragraph; done
prompts=(
  "Once upon a time, there was a little robot who lived in a quiet town by the sea."
  "def fibonacci(n):"
  "The capital of France is"
  "$long_prompt"
)

make_model() {  # name -> $tmp/name-f16.gguf
  case $1 in
    qwen2-small)
      "$strata" gguf make-random --arch qwen2 --n-layer 2 --n-embd 256 --n-head 4 --n-head-kv 2 --n-ff 512 \
        --ctx 1024 --rope-freq-base 1000000 --rms-eps 1e-6 --tie-embeddings --dtype f16 --seed 7 \
        --vocab-from "$shared/tokenizer/ggml-vocab-starcoder.gguf" -o "$tmp/$1-f16.gguf" ;;
    llama3-small)
      "$strata" gguf make-random --arch llama --n-layer 2 --n-embd 256 --n-head 4 --n-head-kv 1 --n-ff 768 \
        --ctx 1024 --rope-freq-base 500000 --llama3-rope-factor 32 --tie-embeddings --dtype f16 --seed 7 \
        --vocab-from "$shared/tokenizer/ggml-vocab-llama-spm.gguf" -o "$tmp/$1-f16.gguf" ;;
  esac
}

for model in qwen2-small llama3-small; do
  out="$root/tests/data/reference/$model"
  mkdir -p "$out"
  make_model "$model"
  for type in f16 q8_0 q4_k q6_k; do
    file="$tmp/$model-$type.gguf"
    case $type in
      f16) ;;
      q8_0) "$lbin/llama-quantize" --pure "$tmp/$model-f16.gguf" "$file" Q8_0 >/dev/null 2>&1 ;;
      q4_k) "$lbin/llama-quantize" --pure "$tmp/$model-f16.gguf" "$file" Q4_K_M >/dev/null 2>&1 ;;
      q6_k) "$lbin/llama-quantize" --pure "$tmp/$model-f16.gguf" "$file" Q6_K >/dev/null 2>&1 ;;
    esac
    "$strata" gguf digest "$file" > "$out/digests-$type.json"
    "$lbin/llama_ref" "$file" "$n_predict" "$top_k" "${prompts[@]}" > "$out/greedy-$type.jsonl"
    echo "$model $type: $(wc -l < "$out/greedy-$type.jsonl") prompts" >&2
  done
done

# The other types our quantizers write, tensors only (on the Llama-3 shape).
model=llama3-small
for type in bf16 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q5_k; do
  case $type in
    q2_k) lt=Q2_K ;; q3_k) lt=Q3_K_M ;; q5_k) lt=Q5_K_M ;; *) lt=${type^^} ;;
  esac
  "$lbin/llama-quantize" --pure "$tmp/$model-f16.gguf" "$tmp/$model-$type.gguf" "$lt" >/dev/null 2>&1
  "$strata" gguf digest "$tmp/$model-$type.gguf" > "$root/tests/data/reference/$model/digests-$type.json"
  echo "$model $type: digests" >&2
done
