# Sourced by the benchmark scripts that start `strata serve` (controller.sh, host-tier-serve.sh,
# remote-kv.sh): the processes they start, killed on exit; free loopback ports; GET over HTTP with
# python3 alone (no curl); waiting for /health.
#   source "$(dirname "$0")/serve-lib.sh"     then   pids+=($!) after each process started
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# GET http://127.0.0.1:PORT/PATH to stdout; fails unless 200.
http_get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "http://127.0.0.1:$1$2" 2>/dev/null; }
# wait_health PORT [PID [LOG]]: until GET /health answers 200, up to 600 s (a large model loads onto
# a GPU first); with PID, fails as soon as that process has exited (naming LOG).
wait_health() {
  local i
  for i in $(seq 3000); do
    http_get "$1" /health >/dev/null && return 0
    if [[ -n ${2:-} ]] && ! kill -0 "$2" 2>/dev/null; then echo "server on port $1 exited${3:+; see $3}" >&2; return 1; fi
    sleep 0.2
  done
  echo "server on port $1 did not come up in 600 s" >&2
  return 1
}
