#!/usr/bin/env bash
# Fair admission under abuse (docs/internals.md, "Fair admission"): a normal client's produce round trip
# alone and beside 12 abusive connections, then a bounded soak mixing abusive connections,
# normal producers, a consumer group and connection churn (benches/fairness.rs). The broker is
# a release build on default settings, pinned to CPU 0 (the clients on CPU 1); its peak RSS is
# printed after each part. Not run by CI.
#
#   benches/fairness.sh              # rtt rows, then a 180 s soak
#   SOAK_SECONDS=600 benches/fairness.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SOAK_SECONDS=${SOAK_SECONDS:-180}
cargo build --release -q -p flume-cli
cargo bench --bench fairness --no-run >/dev/null 2>&1
bench=$(cargo bench --bench fairness --no-run 2>&1 | grep -o 'target/release/deps/fairness-[0-9a-f]*' | head -1)
bin=target/release/flume-cli
data=$(mktemp -d)
base=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999)
flume=127.0.0.1:$base kafka=127.0.0.1:$((base + 1)) http=127.0.0.1:$((base + 2))
pid=
start_broker() {
  rm -rf "${data:?}"/*
  taskset -c 0 "$bin" broker --port "$base" --kafka-port $((base + 1)) --http-port $((base + 2)) \
    --data "$data" >"$data.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$base) 2>/dev/null && break; sleep 0.05; done
  # The topic the abusers fetch: 4 partitions of 4 MiB (128 KiB records).
  "$bin" topics create --broker "$flume" --partitions 4 hog >/dev/null
  "$bin" perf produce --broker "$flume" --topic hog --records 128 --record-size 131072 \
    --partitions-spread 4 >/dev/null
  "$bin" topics create --broker "$flume" --partitions 4 fair >/dev/null
}
stop_broker() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
rss() { awk '/VmHWM/ {printf "peak RSS %.0f MB", $2 / 1024}' "/proc/$pid/status"; }
trap 'stop_broker; rm -rf "$data" "$data.log"' EXIT
run() { taskset -c 1 "$bench" "$@" --flume "$flume" --kafka "$kafka" --http "$http"; }

echo "== produce round trip, alone and beside 12 abusive connections (load $(cut -d' ' -f1-3 /proc/loadavg))"
start_broker
run rtt --rounds 5000 --abusers 12
echo "  broker: $(rss)"
stop_broker

echo "== soak: ${SOAK_SECONDS} s of abusers (a new set every 10 s), 4 producers, a group of 3, churn"
start_broker
run soak --seconds "$SOAK_SECONDS" --abusers 12
echo "  broker: $(rss)"
