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
# N distinct free ports (all bound at once, so no two are the same).
free_ports() { python3 -c 'import socket,sys; s=[socket.socket() for _ in range(int(sys.argv[1]))]; [x.bind(("127.0.0.1",0)) for x in s]; print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"; }

run() { # name binary http(yes|no)
    local name="$1" bin="$2" http="$3" port hport args=()
    read -r port hport <<<"$(free_ports 2)"
    rm -rf "$WORK/data"
    if [[ "$http" == yes ]]; then args=(--http-port "$hport"); fi
    taskset -c 0 "$bin" broker --port "$port" --data "$WORK/data" "${args[@]}" >"$WORK/broker.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 100); do grep -q "listening on" "$WORK/broker.log" && break; sleep 0.1; done
    if [[ "$http" == yes ]]; then
        (while sleep 1; do curl -fsS "http://127.0.0.1:$hport/metrics" >/dev/null || true; done) &
        SCRAPER_PID=$!
    fi
    local out
    out="$(taskset -c 1 "$CLI" perf produce --broker "127.0.0.1:$port" --topic p100 --records 2000000 --record-size 100 2>&1 | tail -n 3)" || true
    # The broker's CPU time (user + system, clock ticks of 10 ms) for the whole run.
    local cpu
    cpu="$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$BROKER_PID/stat" 2>/dev/null || echo "?")"
    [[ -n "$SCRAPER_PID" ]] && { kill "$SCRAPER_PID" 2>/dev/null || true; wait "$SCRAPER_PID" 2>/dev/null || true; SCRAPER_PID=""; }
    kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true; BROKER_PID=""
    printf '%-22s %s, broker CPU %s s\n' "$name" "$(grep -o '[0-9]* records/s' <<<"$out" || echo "failed: $out")" "$cpu"
    grep -q "records/s" <<<"$out" || tail -n 5 "$WORK/broker.log"
}

for i in $(seq "$RUNS"); do
    [[ -n "$BASELINE" ]] && run "round $i baseline" "$BASELINE" no
    run "round $i no --http-port" "$CLI" no
    run "round $i --http-port" "$CLI" yes
done
