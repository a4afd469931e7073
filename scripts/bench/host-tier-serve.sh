#!/usr/bin/env bash
# The host KV tier (`strata serve --kv-host-memory`, issue 12) under a shared-prefix multi-turn chat
# load larger than the device KV pool holds: the same `bench serve` load run twice against a fresh
# `strata serve`, (a) with --kv-memory alone, (b) with the same --kv-memory and a host tier of
# HOST_MULT times it. Every turn of a conversation resends the whole history, so a turn's prompt is a
# prefix hit on the previous turn's blocks if they are still cached somewhere: with a small pool
# (a) evicts them before the conversation comes back, (b) keeps them in host memory.
#
#   scripts/bench/host-tier-serve.sh MODEL DEVICE [extra `strata serve` flags...]
#   [STRATA=build/bin/strata] [CONVERSATIONS=64] [TURNS=4] [INPUT_LEN=48] [OUTPUT_LEN=32]
#   [CONCURRENCY=8] [TOKENS_PER_WORD=3] [KV_MEMORY=bytes|size] [HOST_MULT=8] [ROUNDS=1]
#   [THREADS=] [OUT_DIR=/tmp/strata-host-tier-serve]
#
# KV_MEMORY, when not given, is the KV of CONCURRENCY / 2 whole conversations (TURNS x (INPUT_LEN x
# TOKENS_PER_WORD + OUTPUT_LEN) tokens each; the per-token bytes from the model's metadata, f16 K and
# V): enough that the longest conversation fits and the batch runs, far too little for the
# histories of all CONVERSATIONS. Pass --kv-dtype etc. as extra flags (KV_MEMORY stays bytes).
# One line per run: completed, duration, prefix hit rate (hit/queried prompt tokens from the
# server's /metrics over the run), TTFT p50/p99, req/s, output tok/s, preemptions, and the tier
# metrics scraped from /metrics at the end (strata_kv_tier_*: host blocks used+cached/total, host
# spills and fetches, cold bytes moved). Builds nothing; the server is killed on exit; logs,
# /metrics pages and the bench serve JSON stay in OUT_DIR.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
model=$1 device=$2
shift 2
extra=("$@")
root=$(cd "$(dirname "$0")/../.." && pwd)
strata=${STRATA:-$root/build/bin/strata}
conversations=${CONVERSATIONS:-64} turns=${TURNS:-4} input_len=${INPUT_LEN:-48} output_len=${OUTPUT_LEN:-32}
concurrency=${CONCURRENCY:-8} tokens_per_word=${TOKENS_PER_WORD:-3} host_mult=${HOST_MULT:-8} rounds=${ROUNDS:-1}
out=${OUT_DIR:-/tmp/strata-host-tier-serve}
threads=()
[[ -n ${THREADS:-} ]] && threads=(-t "$THREADS")
mkdir -p "$out"
for tool in jq python3 awk; do command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }; done

source "$(dirname "$0")/serve-lib.sh"  # pids/cleanup, free_port, http_get, wait_health
# The sum of a metric over its label sets whose labels contain $3 (e.g. 'tier="host"'), in a page.
metric() { awk -v m="$2" -v l="${3:-}" '($1 == m || index($1, m "{") == 1) && index($1, l) { s += $NF } END { printf "%.0f", s }' "$1"; }

# Per-token KV bytes (f16 K and V) from the model's metadata.
info=$("$strata" gguf info "$model" 2>/dev/null | sed -n '/^metadata:/,/^tensors:/p')
meta() { awk -v k="$1" 'index($1, ".") && substr($1, length($1) - length(k) + 1) == k && $1 !~ /^tokenizer/ { print $NF; exit }' <<<"$info"; }
n_layer=$(meta .block_count) n_embd=$(meta .embedding_length) n_head=$(meta .attention.head_count)
n_head_kv=$(meta .attention.head_count_kv)
n_head_kv=${n_head_kv:-$n_head}
[[ -n $n_layer && -n $n_embd && -n $n_head ]] || { echo "cannot read the model's shape from 'strata gguf info $model'" >&2; exit 1; }
token_bytes=$((2 * 2 * n_layer * n_head_kv * n_embd / n_head))
conv_tokens=$((turns * (input_len * tokens_per_word + output_len)))
if [[ -n ${KV_MEMORY:-} ]]; then
  kv_memory=$KV_MEMORY
else
  pool_convs=$(((concurrency + 1) / 2))
  kv_memory=$((pool_convs * conv_tokens * token_bytes))
fi
kv_bytes=$(python3 -c '
import re, sys
m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?)B?\s*", sys.argv[1], re.I)
if not m: sys.exit("bad KV_MEMORY " + sys.argv[1])
n, u, i = float(m.group(1)), m.group(2).upper(), m.group(3)
print(int(n * (1024 if i or u == "" else 1000) ** "_KMGT".index(u or "_")))' "$kv_memory")
host_bytes=$((kv_bytes * host_mult))

echo "# machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg); strata: $strata ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "# model $model ($n_layer layers, $n_head_kv KV heads x $((n_embd / n_head)): $token_bytes B of f16 KV per token), --device $device ${extra[*]}"
echo "# load: $conversations conversations x $turns turns (chat, multi-turn: each turn resends the history + $input_len words; $output_len tokens per reply, --ignore-eos), --max-concurrency $concurrency"
echo "# --kv-memory $kv_bytes B (~$((kv_bytes / token_bytes)) tokens; a whole conversation ~$conv_tokens tokens, all of them ~$((conversations * conv_tokens))); b adds --kv-host-memory $host_bytes B (x$host_mult)"
echo "| round | config | completed | duration | prefix hit rate (hit/queried tokens) | TTFT p50 / p99 | req/s | output tok/s | preemptions | host blocks used+cached / total | host spills / fetches | file spills / fetches | cold bytes moved | hot blocks total |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

# run CONFIG(a|b) ROUND: a fresh server, one bench serve, one result line.
run() {
  local cfg=$1 round=$2 host=() port spid json log
  [[ $cfg == b ]] && host=(--kv-host-memory "$host_bytes")
  port=$(free_port)
  log=$out/serve-$cfg$round.log
  "$strata" serve --model "$model" --device "$device" --port "$port" "${threads[@]}" --kv-memory "$kv_bytes" \
    "${host[@]}" "${extra[@]}" >"$log" 2>&1 &
  spid=$!
  pids+=("$spid")
  wait_health "$port" "$spid" "$log"
  local url=http://127.0.0.1:$port
  http_get "$port" /metrics >"$out/metrics-$cfg$round-before.txt"
  json=$out/bench-$cfg$round.json
  "$strata" bench serve --base-url "$url" --endpoint chat --dataset multi-turn --turns "$turns" \
    --num-prompts $((conversations * turns)) --input-len "$input_len" --output-len "$output_len" --ignore-eos \
    --max-concurrency "$concurrency" --seed 1 --quiet --json-out "$json" >"$out/bench-$cfg$round.txt"
  local m=$out/metrics-$cfg$round.txt mb=$out/metrics-$cfg$round-before.txt
  http_get "$port" /metrics >"$m"
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  local hit=$(($(metric "$m" strata_prefix_cache_hit_tokens_total) - $(metric "$mb" strata_prefix_cache_hit_tokens_total)))
  local queried=$(($(metric "$m" strata_prefix_cache_queried_tokens_total) - $(metric "$mb" strata_prefix_cache_queried_tokens_total)))
  local pre=$(($(metric "$m" strata_preemptions_total) - $(metric "$mb" strata_preemptions_total)))
  local hu hc ht hs hf fs ff cb hot
  hu=$(metric "$m" strata_kv_tier_blocks 'tier="host",state="used"')
  hc=$(metric "$m" strata_kv_tier_blocks 'tier="host",state="cached"')
  ht=$(metric "$m" strata_kv_tier_blocks 'tier="host",state="total"')
  hs=$(metric "$m" strata_kv_tier_moves_total 'tier="host",op="spill"')
  hf=$(metric "$m" strata_kv_tier_moves_total 'tier="host",op="fetch"')
  fs=$(metric "$m" strata_kv_tier_moves_total 'tier="file",op="spill"')
  ff=$(metric "$m" strata_kv_tier_moves_total 'tier="file",op="fetch"')
  cb=$(metric "$m" strata_kv_cold_transfer_bytes_total)
  hot=$(metric "$m" strata_kv_tier_blocks 'tier="hot",state="total"')
  local label
  [[ $cfg == a ]] && label="a: --kv-memory alone" || label="b: + --kv-host-memory x$host_mult"
  jq -r --arg name "$label" --arg round "$round" --arg hit "$hit" --arg q "$queried" --arg pre "$pre" \
    --arg host "$((hu + hc)) / $ht" --arg hm "$hs / $hf" --arg fm "$fs / $ff" --arg cb "$cb" --arg hot "$hot" '
    "| \($round) | \($name) | \(.completed)/\(.completed + .failed) | \(.duration_s | .*100 | round / 100) s | " +
    "\(if ($q | tonumber) > 0 then ($hit | tonumber) / ($q | tonumber) * 1000 | round / 10 else 0 end)% (\($hit)/\($q)) | " +
    "\(.ttft_ms.median | .*10 | round / 10) / \(.ttft_ms.p99 | .*10 | round / 10) ms | " +
    "\(.request_throughput | .*100 | round / 100) | \(.output_tok_s | round) | \($pre) | \($host) | \($hm) | \($fm) | " +
    "\(($cb | tonumber) / 1e6 | .*100 | round / 100) MB | \($hot) |"' "$json"
}

for round in $(seq "$rounds"); do
  for cfg in a b; do run "$cfg" "$round"; done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); logs, /metrics and JSON in $out"
