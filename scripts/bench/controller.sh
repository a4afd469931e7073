#!/usr/bin/env bash
# Adaptive control (issue 14) measured side by side in one run: `strata serve` with static
# settings (--controller off) against the same server with `--controller pid`, under a load that
# ramps from LOW to HIGH times the server's measured capacity, with mixed prompt and output
# lengths and two QoS classes.
#
# 1. A random-weight model (8 layers, 512 wide, llama-spm vocabulary, f16; `strata gguf
#    make-random --seed 1`) and a small KV pool (--kv-blocks BLOCKS of 16 tokens), so that memory,
#    not compute alone, limits how many requests run at once and preemptions happen.
# 2. Capacity: a closed loop of CAP_CONCURRENCY requests in flight (CAP_N requests) against a
#    fresh `--controller off` server; capacity C = its completed requests per second.
# 3. ROUNDS x CONFIGS (default: off pid), alternating, each on a fresh server with the flags in
#    ARGS_<config> (ARGS_off="--controller off", ARGS_pid="--controller pid"; more configurations
#    for tuning, e.g. CONFIGS="off pid g4" ARGS_g4="--controller pid --controller-kv-gains 4,2,0"):
#    `bench serve --ramp LOW*C:HIGH*C`
#    (Poisson arrivals whose rate ramps linearly over ~DURATION seconds: N = DURATION * C * (LOW +
#    HIGH) / 2 requests unless N is given), of INPUT_LEN / OUTPUT_LEN words /
#    tokens +-RANGE (--random-range-ratio; --ignore-eos, so outputs have exactly their length),
#    --qos-mix interactive=MIX_I,batch=1-MIX_I, the same --seed in every run, /metrics sampled
#    every 250 ms into a CSV (--kv-trace).
# Printed: one line per run (preemptions, throughput, TTFT/TPOT p50/p99 per class, KV usage, the
# load average when it started), the mean of the rounds per configuration and its ratio to the
# first configuration's, and the KV usage over the run in tenths of its duration (mean usage,
# preemptions, running sequences) for each configuration. Servers get --max-queue 100000, so
# that a backlog at 150% shows as latency, not as 429 answers.
#
#   [STRATA=build/bin/strata] [SHARED=<repo>/../shared] [MODEL=] [MAKE_RANDOM_ARGS=...] [DEVICE=]
#   [CONFIGS="off pid"] [ARGS_<config>=...] [ROUNDS=2] [DURATION=180] [N=] [BLOCKS=96] [THREADS=2]
#   [INPUT_LEN=192] [OUTPUT_LEN=64] [RANGE=0.75] [MIX_I=0.3] [LOW=0.5] [HIGH=1.5] [CAPACITY=]
#   [CAP_N=] [CAP_CONCURRENCY=] [SEED=1] [EXTRA_SERVE_ARGS=] [PAIRED=0] [NICE=0] [OUT_DIR=/tmp/strata-controller]
#   scripts/bench/controller.sh
# Elsewhere (a bundle directory): STRATA is the binary, SHARED the folder holding
# tokenizer/ggml-vocab-llama-spm.gguf (the vocabulary of the generated model), or MODEL an existing
# GGUF to serve instead; MAKE_RANDOM_ARGS replaces the generated model's shape (default: the 8-layer
# model above; e.g. "--preset llama-1b --dtype f16" on a GPU). DEVICE=cuda serves with --device
# cuda; EXTRA_SERVE_ARGS adds any serve flags. CAPACITY (req/s) skips the measurement. The
# capacity loop keeps CAP_CONCURRENCY requests in flight (default: enough to fill the KV pool
# twice, at least 16) for CAP_N requests (default: 4 x CAP_CONCURRENCY, at least 64), so it
# saturates a fast server as well as this machine's; N follows from the measured capacity.
# PAIRED=1 runs the configurations of a round at the same time, each server with THREADS threads
# and its own load client on the same arrivals (capacity: as many `off` servers at once, the mean
# of theirs): on a machine shared with other work, each run then meets the same interference
# instead of whatever the other users did during its turn. Use THREADS=1 per server on 2 cores.
# NICE runs the servers and the load client at that niceness (negative needs root): on a machine
# shared with other work, e.g. NICE=-5 keeps a concurrent build from taking half of the cores.
# Builds nothing. Starts its servers on free loopback ports and kills them on exit; the model,
# logs, bench serve JSON and text, the KV traces and the final /metrics of every run stay in OUT_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
strata=${STRATA:-$root/build/bin/strata}
shared=${SHARED:-$root/../shared}
configs=${CONFIGS:-off pid}
: "${ARGS_off:=--controller off}" "${ARGS_pid:=--controller pid}"
rounds=${ROUNDS:-2}
duration=${DURATION:-180}
n=${N:-}
blocks=${BLOCKS:-96}
threads=${THREADS:-2}
input_len=${INPUT_LEN:-192} output_len=${OUTPUT_LEN:-64} range=${RANGE:-0.75}
mix_i=${MIX_I:-0.3}
low=${LOW:-0.5} high=${HIGH:-1.5}
# Enough requests in flight to fill the pool twice (prompts of ~1.3 tokens per word).
cap_conc=${CAP_CONCURRENCY:-$(python3 -c "print(max(16, round(2 * $blocks * 16 / (1.3 * $input_len + $output_len))))")}
cap_n=${CAP_N:-$(( 4 * cap_conc > 64 ? 4 * cap_conc : 64 ))}
cap=${CAPACITY:-}
seed=${SEED:-1}
extra=${EXTRA_SERVE_ARGS:-}
[[ -z ${DEVICE:-} ]] || extra="--device $DEVICE $extra"
paired=${PAIRED:-0}
nice_n=${NICE:-0}
make_random_args=${MAKE_RANDOM_ARGS:---n-layer 8 --n-embd 512 --n-head 8 --n-head-kv 8 --n-ff 1408 --ctx 2048 --dtype f16}
run() { nice -n "$nice_n" "$@"; }
out=${OUT_DIR:-/tmp/strata-controller}
mkdir -p "$out"
[[ -x $strata ]] || { echo "STRATA=$strata is not an executable" >&2; exit 2; }

source "$(dirname "$0")/serve-lib.sh"  # pids/cleanup, free_port, http_get, wait_health

model=${MODEL:-$out/model.gguf}
if [[ ! -f $model ]]; then
  vocab=$shared/tokenizer/ggml-vocab-llama-spm.gguf
  [[ -f $vocab ]] || { echo "no vocabulary at $vocab: set SHARED=dir (holding tokenizer/) or MODEL=file.gguf" >&2; exit 2; }
  # shellcheck disable=SC2086
  "$strata" gguf make-random $make_random_args --vocab-from "$vocab" --seed 1 -o "$model" >/dev/null
fi
serve_common=(--model "$model" -t "$threads" --kv-blocks "$blocks" --max-queue 100000)
mix="interactive=$mix_i,batch=$(python3 -c "print(round(1 - $mix_i, 6))")"
lengths=(--input-len "$input_len" --output-len "$output_len" --random-range-ratio "$range" --ignore-eos)

echo "# machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg); nice $nice_n"
echo "# strata: $strata ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')); serve ${serve_common[*]} $extra"
if command -v nvidia-smi >/dev/null 2>&1; then echo "# gpu: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"; fi
for cfg in $configs; do v=ARGS_$cfg; echo "# config $cfg: ${!v}"; done

declare -A ports spids
# start_server NAME ARGS...: a fresh server, its port in ports[NAME] (not waited for: wait_up).
start_server() {
  local name=$1
  shift
  ports[$name]=$(free_port)
  # shellcheck disable=SC2086
  nice -n "$nice_n" "$strata" serve "${serve_common[@]}" --port "${ports[$name]}" $extra "$@" >"$out/serve-$name.log" 2>&1 &  # nice execs: $! is the server
  spids[$name]=$!
  pids+=("$!")
}
wait_up() { local name; for name in "$@"; do wait_health "${ports[$name]}"; done; }
stop_server() {
  http_get "${ports[$1]}" /metrics >"$out/metrics-$1.txt" || true
  kill "${spids[$1]}" 2>/dev/null || true
  wait "${spids[$1]}" 2>/dev/null || true
}
# load NAME ARGS...: bench serve against server NAME (JSON in $out/NAME.json, report in NAME.txt).
load() {
  local name=$1
  shift
  run "$strata" bench serve --base-url "http://127.0.0.1:${ports[$name]}" "${lengths[@]}" --qos-mix "$mix" --seed "$seed" \
    --quiet --json-out "$out/$name.json" "$@" >"$out/$name.txt"
}
together=1
if [[ $paired == 1 ]]; then together=$(wc -w <<<"$configs"); fi

# 2. Capacity (with PAIRED=1: as many `off` servers as configurations, loaded at once).
if [[ -z $cap ]]; then
  names=()
  for i in $(seq "$together"); do names+=("capacity-$i"); start_server "capacity-$i" --controller off; done
  wait_up "${names[@]}"
  jobs_=()
  for name in "${names[@]}"; do load "$name" --num-prompts "$cap_n" --max-concurrency "$cap_conc" & jobs_+=("$!"); done
  for j in "${jobs_[@]}"; do wait "$j"; done
  for name in "${names[@]}"; do stop_server "$name"; done
  cap=$(python3 -c "import json, sys; print(sum(json.load(open(f'$out/{n}.json'))['request_throughput'] for n in sys.argv[1:]) / len(sys.argv[1:]))" "${names[@]}")
  echo "# capacity: $(python3 -c "print(round($cap, 3))") req/s per server (mean of ${names[*]}; $(python3 -c "import json; j = json.load(open('$out/capacity-1.json')); print(f\"{j['output_tok_s']:.0f} output tok/s, {j['preemptions']} preemptions\")") for the first) with $cap_conc in flight ($cap_n requests)"
else
  echo "# capacity: $cap req/s (CAPACITY, not measured)"
fi
from=$(python3 -c "print(round($low * $cap, 4))")
to=$(python3 -c "print(round($high * $cap, 4))")
[[ -n $n ]] || n=$(python3 -c "print(max(1, round($duration * ($from + $to) / 2)))")
echo "# load: --ramp $from:$to (${low}x -> ${high}x capacity) over ~$(python3 -c "print(round(2 * $n / ($from + $to)))") s, $n requests, --qos-mix $mix, ${lengths[*]}, --seed $seed; paired $paired"

# 3. The runs: the configurations alternate within each round (or run at once with PAIRED=1).
runs=()
: >"$out/loads.txt"
for round in $(seq "$rounds"); do
  if [[ $paired == 1 ]]; then groups=("$configs"); else read -ra groups <<<"$configs"; fi
  for group in "${groups[@]}"; do
    names=()
    for cfg in $group; do
      v=ARGS_$cfg
      # shellcheck disable=SC2086
      start_server "$cfg-$round" ${!v}
      names+=("$cfg-$round")
    done
    wait_up "${names[@]}"
    jobs_=()
    for name in "${names[@]}"; do
      echo "$name $(cut -d' ' -f1 /proc/loadavg)" >>"$out/loads.txt"
      load "$name" --num-prompts "$n" --ramp "$from:$to" --kv-trace "$out/kv-$name.csv" & jobs_+=("$!")
    done
    for j in "${jobs_[@]}"; do wait "$j"; done
    for name in "${names[@]}"; do stop_server "$name"; runs+=("$name"); done
  done
done

python3 - "$out" "$configs" "${runs[@]}" <<'PY'
import csv, json, statistics, sys
out, configs, runs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
loads = dict(line.split() for line in open(f"{out}/loads.txt"))
rows = {}
for name in runs:
    j = json.load(open(f"{out}/{name}.json"))
    q = j["qos_classes"]
    rows[name] = {
        "preemptions": j["preemptions"], "req/s": j["request_throughput"], "out tok/s": j["output_tok_s"],
        "int TTFT p50": q["interactive"]["ttft_ms"]["median"], "int TTFT p99": q["interactive"]["ttft_ms"]["p99"],
        "int TPOT p50": q["interactive"]["tpot_ms"]["median"], "int TPOT p99": q["interactive"]["tpot_ms"]["p99"],
        "batch TTFT p50": q["batch"]["ttft_ms"]["median"], "batch TTFT p99": q["batch"]["ttft_ms"]["p99"],
        "batch TPOT p50": q["batch"]["tpot_ms"]["median"], "batch TPOT p99": q["batch"]["tpot_ms"]["p99"],
        "KV mean": 100 * j["kv_usage"]["mean"], "KV p90": 100 * j["kv_usage"]["p90"],
        "KV >=90%": 100 * j["kv_usage"]["share_at_or_above_90"], "failed": j["failed"], "duration s": j["duration_s"],
        "load": float(loads[name]),
    }
cols = list(next(iter(rows.values())).keys())
fmt = lambda v: f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
print("\n| run | " + " | ".join(cols) + " |")
print("| --- " * (len(cols) + 1) + "|")
for name, r in rows.items():
    print(f"| {name} | " + " | ".join(fmt(r[c]) for c in cols) + " |")
mean = {cfg: {c: statistics.mean(r[c] for n, r in rows.items() if n.rsplit("-", 1)[0] == cfg) for c in cols} for cfg in configs}
for cfg in configs:
    print(f"| mean {cfg} | " + " | ".join(fmt(mean[cfg][c]) for c in cols) + " |")
median = {cfg: {c: statistics.median(r[c] for n, r in rows.items() if n.rsplit("-", 1)[0] == cfg) for c in cols} for cfg in configs}
for cfg in configs:
    print(f"| median {cfg} | " + " | ".join(fmt(median[cfg][c]) for c in cols) + " |")
base = configs[0]
for what, agg in (("means", mean), ("medians", median)):
    for cfg in configs[1:]:
        print(f"| {cfg} / {base} ({what}) | " + " | ".join(f"{agg[cfg][c] / agg[base][c]:.2f}" if agg[base][c] else "–" for c in cols) + " |")

# KV usage over the run: tenths of each run's duration, the rounds of a configuration pooled.
print("\nKV usage over the run (tenths of its duration; mean over the samples of every round; preemptions in the tenth; running sequences)")
print("| tenth | " + " | ".join(f"{cfg} KV | {cfg} preempt | {cfg} running" for cfg in configs) + " |")
print("| --- " * (1 + 3 * len(configs)) + "|")
table = {}
for cfg in configs:
    buckets = [[] for _ in range(10)]
    pre = [0.0] * 10
    mine = [n for n in runs if n.rsplit("-", 1)[0] == cfg]
    for name in mine:
        pts = [r for r in csv.DictReader(open(f"{out}/kv-{name}.csv")) if r["kv_usage"]]
        if not pts:
            continue
        end = float(pts[-1]["t_s"]) or 1
        last_pre = float(pts[0]["preemptions_total"] or 0)
        for r in pts:
            b = min(9, int(10 * float(r["t_s"]) / end))
            buckets[b].append((float(r["kv_usage"]), float(r["running"] or 0)))
            p = float(r["preemptions_total"] or 0)
            pre[b] += p - last_pre
            last_pre = p
    table[cfg] = [(statistics.mean(u for u, _ in b) if b else 0, pre[i] / max(1, len(mine)),
                   statistics.mean(r for _, r in b) if b else 0) for i, b in enumerate(buckets)]
for i in range(10):
    cells = []
    for cfg in configs:
        u, p, r = table[cfg][i]
        cells += [f"{100 * u:.0f}%", f"{p:.1f}", f"{r:.1f}"]
    print(f"| {i + 1} | " + " | ".join(cells) + " |")
PY
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); files in $out"
