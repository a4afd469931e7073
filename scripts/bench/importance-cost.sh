#!/usr/bin/env bash
# What attention importance (--kv-evict) costs in decode and prefill: `generate` with
#   --kv-evict h2o --kv-budget 100000   (importance computed every step, nothing ever evicted)
# against --kv-evict none, alternating, ROUNDS rounds, one sequence (B=1) and B sequences at once
# (--prompts-file, B copies of the prompt with a distinct first word so none shares a prefix).
#   scripts/bench/importance-cost.sh MODEL DEVICE [ROUNDS] [B] [PROMPT_BYTES]
# (GEN=N tokens generated, default 128; FLAGS="...": more generate flags, e.g. --max-batched-tokens
# 32768 so that all B prompts are prefilled in one step and the generation phase is decode alone.)
# Prints one line per run: variant, batch, gen tok/s (mean over the requests), prompt tok/s.
set -euo pipefail
model=$1 device=$2 rounds=${3:-3} batch=${4:-16} bytes=${5:-6000} gen=${GEN:-128}
read -r -a flags <<<"${FLAGS:-}"
strata=${STRATA:-$(command -v strata || echo build/bin/strata)}
text=$(dirname "$0")/../../tests/data/stories260K-t1.txt
prompt=$(head -c "$bytes" "$text" | tr '\n' ' ')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 "$batch"); do
  printf '{"prompt": "Story %d. %s"}\n' "$i" "$(printf '%s' "$prompt" | sed 's/\\/\\\\/g; s/"/\\"/g')" >>"$tmp/prompts.jsonl"
done
run() {  # variant batch args...
  local v=$1 b=$2; shift 2
  local src=(-p "$prompt")
  [[ $b -gt 1 ]] && src=(--prompts-file "$tmp/prompts.jsonl")
  "$strata" generate -m "$model" --device "$device" "${src[@]}" -n "$gen" --temperature 0 --ignore-eos --json "${flags[@]}" "$@" 2>/dev/null |
    awk -v v="$v" -v b="$b" '/^\{/ {
      match($0, /"gen_tok_s": *[0-9.e+-]+/); g += substr($0, RSTART + 12, RLENGTH - 12) + 0
      match($0, /"prompt_tok_s": *[0-9.e+-]+/); p += substr($0, RSTART + 15, RLENGTH - 15) + 0; n++ }
      END { printf "%s B=%s gen_tok_s=%.1f prompt_tok_s=%.1f n=%d\n", v, b, g / n, p / n, n }'
}
for r in $(seq 1 "$rounds"); do
  for b in 1 "$batch"; do
    run none "$b"
    run h2o "$b" --kv-evict h2o --kv-budget 100000
  done
done
