#!/usr/bin/env bash
# The file part of the cold KV tier as a tier below host memory (issue 12): the same `bench offline`
# load run twice on a small KV pool with a small host tier above a spill file, with migration (the
# default: when host memory is full its least recently written blocks move down to the file and the
# new block takes the host slot) and without it (--kv-no-host-migrate: new blocks go to the file
# once host memory is full). The pool is too small to keep the cached prefixes, so prefix hits come
# back from the cold tier, from host memory or from the file. Two loads (WORKLOAD):
#   turns   CONVERSATIONS conversations of TURNS turns of TURN_WORDS words, submitted turn after turn
#           (every conversation's first turn, then every second turn, ...); each turn resends its
#           conversation's history: a cyclic reuse, each prefix coming back after all the others.
#   shared  REQUESTS requests, each one of SYSTEMS system prompts (SYSTEM_WORDS words, chosen at
#           random) and a question of its own (TURN_WORDS words): a few hot prefixes among one-off
#           blocks that are never reused.
#
#   scripts/bench/cold-migrate.sh MODEL [extra `bench offline` flags...]
#   [STRATA=build/bin/strata] [WORKLOAD=turns|shared] [CONVERSATIONS=48] [TURNS=4] [REQUESTS=384]
#   [SYSTEMS=8] [SYSTEM_WORDS=80] [TURN_WORDS=40] [OUTPUT_LEN=16] [KV_BLOCKS=64] [HOST_MEMORY=256KiB]
#   [SPILL_SIZE=256MiB] [RATE=inf] [OUT_DIR=/tmp/strata-cold-migrate]
#
# One line per run from the bench's JSON: request throughput, TTFT p50/p99, prefix hit rate, and the
# cold tier's moves (`kv_cold`: spills and fetches per part, blocks moved down). Builds nothing.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
model=$1
shift
extra=("$@")
root=$(cd "$(dirname "$0")/../.." && pwd)
strata=${STRATA:-$root/build/bin/strata}
out=${OUT_DIR:-/tmp/strata-cold-migrate}
mkdir -p "$out/spill"
for tool in jq python3; do command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }; done
WORKLOAD=${WORKLOAD:-turns} CONVERSATIONS=${CONVERSATIONS:-48} TURNS=${TURNS:-4} REQUESTS=${REQUESTS:-384} \
  SYSTEMS=${SYSTEMS:-8} SYSTEM_WORDS=${SYSTEM_WORDS:-80} TURN_WORDS=${TURN_WORDS:-40} OUTPUT_LEN=${OUTPUT_LEN:-16} \
  python3 - >"$out/turns.jsonl" <<'PY'
import json, os, random
rng = random.Random(7)
words = ("the a little big girl boy dog cat sun tree park ball red blue happy sad ran saw played found "
         "went home mom dad friend day night bird flower box toy car and then but so she he they was").split()
env = lambda k: int(os.environ[k])
text = lambda n: " ".join(rng.choice(words) for _ in range(n)) + ". "
if os.environ["WORKLOAD"] == "turns":
    history = [""] * env("CONVERSATIONS")
    for turn in range(env("TURNS")):
        for i in range(len(history)):
            history[i] += text(env("TURN_WORDS"))
            print(json.dumps({"prompt": history[i], "max_tokens": env("OUTPUT_LEN")}))
else:
    systems = [text(env("SYSTEM_WORDS")) for _ in range(env("SYSTEMS"))]
    for i in range(env("REQUESTS")):
        print(json.dumps({"prompt": rng.choice(systems) + text(env("TURN_WORDS")), "max_tokens": env("OUTPUT_LEN")}))
PY
n=$(wc -l <"$out/turns.jsonl")
for mode in migrate no-migrate; do
  flags=(--kv-blocks "${KV_BLOCKS:-64}" --kv-host-memory "${HOST_MEMORY:-256KiB}" --kv-spill-dir "$out/spill"
         --kv-spill-size "${SPILL_SIZE:-256MiB}" --dataset "$out/turns.jsonl" --num-prompts "$n" --request-rate "${RATE:-inf}")
  [[ $mode == no-migrate ]] && flags+=(--kv-no-host-migrate)
  "$strata" bench offline -m "$model" "${flags[@]}" "${extra[@]}" --json >"$out/$mode.json" 2>"$out/$mode.log"
  jq -r --arg mode "$mode" '"\($mode): \(.request_throughput*100|round/100) req/s, TTFT p50 \(.ttft_ms.p50*10|round/10) ms p99 \(.ttft_ms.p99*10|round/10) ms, hit rate \(.prefix_hit_rate*1000|round/10)%, preemptions \(.preemptions); cold: host \(.kv_cold.host_slots) + file \(.kv_cold.file_slots) slots, spills host \(.kv_cold.host_spills) / file \(.kv_cold.file_spills), fetches host \(.kv_cold.host_fetches) / file \(.kv_cold.file_fetches), moved down \(.kv_cold.file_migrations)"' "$out/$mode.json"
done
