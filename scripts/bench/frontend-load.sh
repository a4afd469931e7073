#!/usr/bin/env bash
# The serving front end under many concurrent streams, side by side with llama.cpp's llama-server
# on the same machine and model (issue 18): N streaming completions of OUT tokens each, all sent at
# once by `strata bench serve`, with GET /health probed every 20 ms during the load.
#   [NP=256] [SERVERS="strata llama"] [THREADS=2] [TIMEOUT_S=600] [SERVER_CPUS=0-7 CLIENT_CPUS=8-15]
#     scripts/bench/frontend-load.sh STRATA_BIN LLAMA_SERVER_BIN [N=2000] [OUT=64]
# NP: llama-server's parallel slots (-np); requests beyond them wait in its queue. With -np 2000 (a
# slot per stream) b4748 completed nothing in 600 s on the 2-core machine: its unified KV cache makes
# every step attend over all 2000 x 128 cells.
# THREADS: compute threads of each server (-t). TIMEOUT_S: the client's per-request limit.
# SERVER_CPUS / CLIENT_CPUS: when both are set, the servers and the load client are pinned to these
# CPU lists (taskset), so that on a machine with enough cores they do not compete.
# Model: ../shared/models/stories260K.gguf. Results: one `bench serve` table per server, and the
# servers' RSS and thread counts before and after, on stdout. Needs only bash (no curl).
set -euo pipefail
strata=$1 llama=$2 n=${3:-2000} out=${4:-64} np=${NP:-256} servers=${SERVERS:-strata llama}
threads=${THREADS:-2} timeout_s=${TIMEOUT_S:-600}
model=$(cd "$(dirname "$0")/../.." && pwd)/../shared/models/stories260K.gguf
port_s=18181 port_l=18182
ulimit -n "$(ulimit -Hn)"
pin_server=() pin_client=()
if [[ -n "${SERVER_CPUS:-}" && -n "${CLIENT_CPUS:-}" ]]; then
  pin_server=(taskset -c "$SERVER_CPUS") pin_client=(taskset -c "$CLIENT_CPUS")
fi

rss() { awk '/VmRSS/ {print $2 " KiB"}' /proc/$1/status; }
nthreads() { ls /proc/$1/task | wc -l; }
health_ok() {  # port: GET /health answered 200
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
  IFS= read -r -t 5 line <&3 || line=""
  exec 3>&-
  [[ "$line" == *" 200 "* ]]
}
wait_health() { for _ in $(seq 600); do health_ok "$1" && return 0; sleep 0.1; done; return 1; }

run() {  # name port pid
  wait_health "$2"
  echo "== $1: idle RSS $(rss "$3"), threads $(nthreads "$3")"
  "${pin_client[@]}" "$strata" bench serve --base-url "http://127.0.0.1:$2" --num-prompts "$n" --input-len 16 --output-len "$out" \
    --ignore-eos --probe-health-ms 20 --timeout-s "$timeout_s" --quiet --json-out "/tmp/frontend-$1.json" |
    grep -E "Successful|Failed|duration|Output token|Total token|Median TTFT|P99 TTFT|Probes|answer|first error" || true
  echo "== $1: after RSS $(rss "$3"), threads $(nthreads "$3")"
}

if [[ " $servers " == *" strata "* ]]; then
  "${pin_server[@]}" "$strata" serve --model "$model" --port $port_s -t "$threads" --max-queue $((n + 100)) --max-seqs 256 \
    >/tmp/frontend-strata.log 2>&1 &
  pid=$!
  run strata $port_s $pid
  kill $pid; wait $pid 2>/dev/null || true
fi

# llama-server: NP slots of 128 tokens of context each (plenty here), and an HTTP thread per
# connection, which its cpp-httplib server needs to hold them all.
if [[ " $servers " == *" llama "* ]]; then
  "${pin_server[@]}" "$llama" -m "$model" --port $port_l -t "$threads" -np "$np" -c $((np * 128)) --threads-http $((n + 16)) \
    >/tmp/frontend-llama.log 2>&1 &
  pid=$!
  run llama-server $port_l $pid
  kill $pid; wait $pid 2>/dev/null || true
fi
