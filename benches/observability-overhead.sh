#!/usr/bin/env bash
# Overhead of the HTTP side and metrics on batched produce throughput:
# `perf produce --topic p100 --records 2000000 --record-size 100` against a
# broker started with and without --http-port (and, when BASELINE names a
# flume-cli built without metrics, against that one too), RUNS rounds, the
# configurations interleaved back to back. Broker pinned to CPU 0, client to
# CPU 1, as benches/compare.sh does. A Prometheus-like scraper reads /metrics
# every second during the runs with --http-port.
#
#   benches/observability-overhead.sh [path/to/flume-cli]   (BASELINE=..., RUNS=3)
set -euo pipefail
CLI="${1:-target/release/flume-cli}"
RUNS="${RUNS:-3}"
BASELINE="${BASELINE:-}"
WORK="$(mktemp -d)"
BROKER_PID=""
SCRAPER_PID=""
cleanup() {
    [[ -n "$SCRAPER_PID" ]] && kill "$SCRAPER_PID" 2>/dev/null || true
    [[ -n "$BROKER_PID" ]] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

run() { # name binary http(yes|no)
    local name="$1" bin="$2" http="$3" port hport args=()
    port="$(free_port)"
    rm -rf "$WORK/data"
    if [[ "$http" == yes ]]; then hport="$(free_port)"; args=(--http-port "$hport"); fi
    taskset -c 0 "$bin" broker --port "$port" --data "$WORK/data" "${args[@]}" >"$WORK/broker.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 100); do grep -q "listening on" "$WORK/broker.log" && break; sleep 0.1; done
    if [[ "$http" == yes ]]; then
        (while sleep 1; do curl -fsS "http://127.0.0.1:$hport/metrics" >/dev/null || true; done) &
        SCRAPER_PID=$!
    fi
    local out
    out="$(taskset -c 1 "$CLI" perf produce --broker "127.0.0.1:$port" --topic p100 --records 2000000 --record-size 100 2>&1 | tail -n 1)"
    [[ -n "$SCRAPER_PID" ]] && { kill "$SCRAPER_PID" 2>/dev/null || true; wait "$SCRAPER_PID" 2>/dev/null || true; SCRAPER_PID=""; }
    kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null || true; BROKER_PID=""
    printf '%-22s %s\n' "$name" "$(grep -o '[0-9]* records/s' <<<"$out")"
}

for i in $(seq "$RUNS"); do
    [[ -n "$BASELINE" ]] && run "round $i baseline" "$BASELINE" no
    run "round $i no --http-port" "$CLI" no
    run "round $i --http-port" "$CLI" yes
done
