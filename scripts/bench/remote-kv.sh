#!/usr/bin/env bash
# The remote KV tier (`strata serve --kv-remote`, issue 15) measured side by side in one run.
#
# serve:     a multi-turn chat load over TWO `strata serve` replicas (-t 1 each) with
#            `bench serve --route round-robin`, so consecutive turns of a conversation land on
#            different replicas: (a) without the remote tier, (b) with --kv-remote on one Redis.
#            Fresh replicas and an emptied Redis (FLUSHALL) for every configuration; the pair runs
#            ROUNDS times in the order a b a b. Reported per configuration: prefix-cache hit rate
#            (hit / queried tokens summed over both replicas), TTFT p50/p99, output tok/s, req/s,
#            and the replicas' strata_kv_remote_* counters (hit tokens, hit/miss blocks, bytes).
# bandwidth: bench/remote_kv_bench (make_redis_kv_pool publishing and looking up BW_MIB of blocks
#            of 2 MiB and 64 KiB) and `redis-benchmark -t set,get -d SIZE -P 16 -c 1` with the same
#            number of values, on the same redis-server, ROUNDS times; MB/s and ours/redis ratios.
#
#   [STRATA=build/bin/strata] [REMOTE_KV_BENCH=build/bin/remote_kv_bench] [SECTIONS="serve bandwidth"]
#   [ROUNDS=2] [CONVERSATIONS=300] [TURNS=4] [INPUT_LEN=48] [OUTPUT_LEN=32] [CONCURRENCY=8]
#   [BW_MIB=256] [MODEL=../shared/models/stories260K.gguf] [OUT_DIR=/tmp/strata-remote-kv]
#   scripts/bench/remote-kv.sh
# Builds nothing. Starts its own redis-server and replicas on free loopback ports; every process it
# started is killed on exit. Logs and the bench serve JSON of each run are kept in OUT_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
strata=${STRATA:-build/bin/strata}
kvbench=${REMOTE_KV_BENCH:-build/bin/remote_kv_bench}
sections=${SECTIONS:-serve bandwidth}
rounds=${ROUNDS:-2}
conversations=${CONVERSATIONS:-300} turns=${TURNS:-4} input_len=${INPUT_LEN:-48} output_len=${OUTPUT_LEN:-32}
concurrency=${CONCURRENCY:-8}
bw_mib=${BW_MIB:-256}
model=${MODEL:-$root/../shared/models/stories260K.gguf}
out=${OUT_DIR:-/tmp/strata-remote-kv}
mkdir -p "$out"

source "$(dirname "$0")/serve-lib.sh"  # pids/cleanup, free_port, http_get, wait_health
# The sum of a counter over all its label sets in a /metrics page.
metric() { awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d", s }' "$1"; }

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
rcli() { redis-cli -p "$redis_port" "$@"; }
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$redis_port; strata: $strata ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"

# serve_run LABEL CONFIG(a|b) ROUND: fresh replicas, one bench serve, one result line.
serve_run() {
  local cfg=$1 round=$2 remote=() ports=() urls=() spids=() i load
  [[ $cfg == b ]] && remote=(--kv-remote "redis://127.0.0.1:$redis_port")
  rcli flushall >/dev/null
  for i in 0 1; do
    ports[i]=$(free_port)
    "$strata" serve --model "$model" --port "${ports[i]}" -t 1 --kv-block-size 16 "${remote[@]}" \
      >"$out/serve-$cfg$round-$i.log" 2>&1 &
    spids[i]=$!
    pids+=("${spids[i]}")
  done
  for i in 0 1; do wait_health "${ports[i]}" "${spids[i]}" "$out/serve-$cfg$round-$i.log"; urls+=("http://127.0.0.1:${ports[i]}"); done
  local json=$out/bench-$cfg$round.json
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$strata" bench serve --base-url "${urls[0]}" --base-url "${urls[1]}" --route round-robin --endpoint chat \
    --dataset multi-turn --turns "$turns" --num-prompts $((conversations * turns)) --input-len "$input_len" \
    --output-len "$output_len" --ignore-eos --max-concurrency "$concurrency" --seed 1 --quiet \
    --json-out "$json" >"$out/bench-$cfg$round.txt"
  local rh=0 rhb=0 rmb=0 rrb=0 rwb=0 pub=0 to=0
  for i in 0 1; do
    http_get "${ports[i]}" /metrics >"$out/metrics-$cfg$round-$i.txt"
    local m=$out/metrics-$cfg$round-$i.txt
    rh=$((rh + $(metric "$m" strata_kv_remote_hit_tokens_total)))
    rhb=$((rhb + $(metric "$m" strata_kv_remote_hit_blocks_total)))
    rmb=$((rmb + $(metric "$m" strata_kv_remote_miss_blocks_total)))
    rrb=$((rrb + $(metric "$m" strata_kv_remote_read_bytes_total)))
    rwb=$((rwb + $(metric "$m" strata_kv_remote_written_bytes_total)))
    pub=$((pub + $(metric "$m" strata_kv_remote_published_blocks_total)))
    to=$((to + $(metric "$m" strata_kv_remote_timeouts_total)))
  done
  for i in 0 1; do kill "${spids[i]}" 2>/dev/null || true; wait "${spids[i]}" 2>/dev/null || true; done
  local label; [[ $cfg == a ]] && label="a: local only" || label="b: --kv-remote"
  jq -r --arg name "$label" --arg round "$round" --arg load "$load" --arg rh "$rh" --arg rhb "$rhb" --arg rmb "$rmb" --arg rrb "$rrb" \
    --arg rwb "$rwb" --arg pub "$pub" --arg to "$to" '
    "| \($round) | \($name) | \($load) | \(.completed)/\(.completed + .failed) | \(.duration_s | .*100 | round / 100) s | " +
    "\(.prefix_hit_tokens / .prefix_queried_tokens * 1000 | round / 10)% (\(.prefix_hit_tokens)/\(.prefix_queried_tokens)) | " +
    "\(.ttft_ms.median | .*10 | round / 10) / \(.ttft_ms.p99 | .*10 | round / 10) ms | " +
    "\(.output_tok_s | round) | \(.request_throughput | .*10 | round / 10) | \($rh) | " +
    "\($rhb)/\($rmb) | \(($rrb | tonumber) / 1e6 | .*10 | round / 10) / \(($rwb | tonumber) / 1e6 | .*10 | round / 10) MB | \($pub) | \($to) |"' "$json"
}

if [[ " $sections " == *" serve "* ]]; then
  echo
  echo "## serve: $conversations conversations x $turns turns (chat; $input_len words per user turn, $output_len tokens per reply, --ignore-eos), --max-concurrency $concurrency, 2 replicas -t 1, --route round-robin"
  echo "| round | config | load (1 min) at start | completed | duration | prefix hit rate (hit/queried tokens) | TTFT p50 / p99 | output tok/s | req/s | remote hit tokens | remote hit/miss blocks | remote read / written | published blocks | remote timeouts |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for round in $(seq "$rounds"); do
    for cfg in a b; do serve_run "$cfg" "$round"; done
  done
fi

if [[ " $sections " == *" bandwidth "* ]]; then
  echo
  echo "## bandwidth: $bw_mib MiB of values per block size; ours = make_redis_kv_pool (1 connection each way, 16 commands per pipelined batch), redis = redis-benchmark -c 1 -P 16"
  echo "| round | load (1 min) at start | block | values | ours write MB/s | redis SET MB/s | ours/redis write | ours read MB/s | redis GET MB/s | ours/redis read |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for round in $(seq "$rounds"); do
    rcli flushall >/dev/null
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$kvbench" "redis://127.0.0.1:$redis_port" "$bw_mib" 2048,64 >"$out/kvbench-$round.txt"
    rcli flushall >/dev/null
    while read -r size n _vb _ws wmb _rs rmb _; do
      [[ $size =~ ^[0-9]+$ ]] || continue
      redis-benchmark -p "$redis_port" -t set,get -d "$size" -P 16 -c 1 -n "$n" -q 2>/dev/null | tr '\r' '\n' |
        grep -E '^(SET|GET): [0-9.]+ requests per second' >"$out/redis-benchmark-$round-$size.txt"
      rcli flushall >/dev/null
      local_set=$(awk '/^SET:/ {print $2}' "$out/redis-benchmark-$round-$size.txt")
      local_get=$(awk '/^GET:/ {print $2}' "$out/redis-benchmark-$round-$size.txt")
      awk -v r="$round" -v load="$load" -v size="$size" -v n="$n" -v wmb="$wmb" -v rmb="$rmb" -v s="$local_set" -v g="$local_get" 'BEGIN {
        smb = s * size / 1e6; gmb = g * size / 1e6;
        printf "| %s | %s | %s KiB | %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", r, load, size / 1024, n, wmb, smb, wmb / smb, rmb, gmb, rmb / gmb }'
    done <"$out/kvbench-$round.txt"
  done
fi
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); logs and JSON in $out"
