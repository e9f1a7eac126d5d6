#!/usr/bin/env bash
# Queues against consumer groups on one partition, in one run (issue #44):
# records/s through a share group of 1, 4 and 16 consumers that accept every
# record on its own (flume-cli perf share: produced while they read), a
# consumer group's one member reading the same number of records (flume-cli
# perf consume --group), and the broker's CPU per record (utime + stime from
# /proc/<pid>/stat around each row). Broker on CPU 0, clients on CPU 1 when
# the machine has two. Not run by CI.
#
#   benches/share.sh [BIN] [records]     (default: target/release/flume-cli, 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/flume-cli}
records=${2:-200000}
data=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
pin_broker=(); pin_client=()
if [ "$(nproc)" -ge 2 ]; then pin_broker=(taskset -c 0); pin_client=(taskset -c 1); fi
"${pin_broker[@]}" "$bin" broker --host 127.0.0.1 --port "$port" --data "$data" >"$data.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
b=(--broker "127.0.0.1:$port")
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rate_of() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["records_per_s"])'; }
row() { # name rate ticks_before ticks_after
  awk -v n="$1" -v r="$records" -v rate="$2" -v a="$3" -v z="$4" -v t="$tck" 'BEGIN {
    printf "%-48s %10.0f records/s   broker %.2f us CPU per record\n", n, rate, (z - a) / t / r * 1e6 }'
}
for c in 1 4 16; do
  "$bin" topics create "q$c" --partitions 1 "${b[@]}" >/dev/null
  t0=$(cpu)
  rate=$("${pin_client[@]}" "$bin" perf share "${b[@]}" --topic "q$c" --records "$records" --consumers "$c" --json | rate_of)
  row "share group, $c consumer(s), accept per record" "$rate" "$t0" "$(cpu)"
done
# The consumer group: the same records, produced first, read by one member (one partition).
"$bin" topics create cg --partitions 1 "${b[@]}" >/dev/null
"${pin_client[@]}" "$bin" perf produce "${b[@]}" --topic cg --records "$records" --record-size 100 --json >/dev/null
t0=$(cpu)
rate=$("${pin_client[@]}" "$bin" perf consume "${b[@]}" --topic cg --records "$records" --group g --json | rate_of)
row "consumer group, 1 member (1 partition)" "$rate" "$t0" "$(cpu)"
