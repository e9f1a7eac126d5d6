#!/usr/bin/env bash
# The broker's cost of the Kafka listener next to the native protocol (issue #14): the release
# broker with both listeners, pinned as compare.sh pins (broker on CPU 0, client on CPU 1);
# N x 100 B records from a librdkafka producer (confluent-kafka, linger.ms 5, its other
# defaults: acks all, no compression, idempotence off unless IDEMPOTENT=1) into the Kafka
# listener, then N x 100 B records from `flume-cli perf produce` (linger 5 ms) into the native
# listener, each into its own one-partition topic. Prints records/s (the client's, from its
# first send to its last acknowledgement) and the broker's CPU seconds per million records
# (utime + stime of the broker process from /proc/<pid>/stat, before and after each run).
# Not run by CI. On a loaded machine the CPU figures still mean something; records/s do not.
#
# usage: benches/kafka-vs-native.sh [records]      (default 2000000)
#   FLUME_CACHE=dir    where the confluent-kafka venv is (made if missing; the same cache as
#                      tests/kafka-clients/run.sh, default ${TMPDIR:-/tmp}/flume-ci-cache)
#   IDEMPOTENT=1       the Kafka producer with enable.idempotence=true
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-2000000}
cargo build --release -q -p flume-cli
bin=target/release/flume-cli
cache=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
venv=$cache/kafka-clients-venv
py=$venv/bin/python
if ! [ -x "$py" ] || ! "$py" -c 'import confluent_kafka' 2>/dev/null; then
  echo "installing confluent-kafka into $venv" >&2
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$py" -m pip install -q --disable-pip-version-check --only-binary=:all: confluent-kafka==2.16.1
fi

data=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
kport=$(free_port)
while [ "$kport" = "$port" ]; do kport=$(free_port); done
taskset -c 0 "$bin" broker --host 127.0.0.1 --port "$port" --kafka-port "$kport" --data "$data" >"$data.log" 2>&1 &
pid=$!
stop_broker() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop_broker; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 200); do
  (exec 3<>/dev/tcp/127.0.0.1/$kport) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.05
done
b="--broker 127.0.0.1:$port"
"$bin" topics create kafka100 --partitions 1 $b >/dev/null
"$bin" topics create native100 --partitions 1 $b >/dev/null

tck=$(getconf CLK_TCK)
# utime + stime of the broker, in clock ticks (fields 14 and 15; the name field has no spaces).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
report() { # name records ticks_before ticks_after rate
  awk -v n="$1" -v r="$2" -v a="$3" -v b="$4" -v t="$tck" -v rate="$5" 'BEGIN {
    s = (b - a) / t
    printf "%-34s %12.0f records/s   broker CPU %.3f s = %.3f s per million records\n", n, rate, s, s / (r / 1e6)
  }'
}

idem=false
[ "${IDEMPOTENT:-0}" = 1 ] && idem=true
before=$(cpu_ticks)
rate=$(taskset -c 1 "$py" - "127.0.0.1:$kport" kafka100 "$records" "$idem" <<'EOF'
import sys, time
from confluent_kafka import Producer
boot, topic, n, idem = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "true"
p = Producer({"bootstrap.servers": boot, "linger.ms": 5, "enable.idempotence": idem})
errors = []
def done(err, msg):
    if err is not None:
        errors.append(err)
value = b"x" * 100
p.produce(topic, value, partition=0, on_delivery=done)  # the first goes before the clock starts
p.flush(30)
t0 = time.perf_counter()
for i in range(n - 1):
    while True:
        try:
            p.produce(topic, value, partition=0, on_delivery=done)
            break
        except BufferError:
            p.poll(0.001)
    if i % 10000 == 0:
        p.poll(0)
left = p.flush(120)
t = time.perf_counter() - t0
if left or errors:
    sys.exit(f"{left} records not acknowledged, errors: {errors[:3]}")
print(f"{(n - 1) / t:.0f}")
EOF
)
after=$(cpu_ticks)
label="Kafka listener (confluent-kafka)"
[ "$idem" = true ] && label="Kafka listener (idempotent)"
report "$label" "$records" "$before" "$after" "$rate"

before=$(cpu_ticks)
out=$(taskset -c 1 "$bin" perf produce $b --topic native100 --records "$records" --record-size 100 --linger-ms 5 --partitions-spread 1 --json) || exit 1
after=$(cpu_ticks)
rate=$(echo "$out" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["records_per_s"])' 2>/dev/null || echo 0)
report "native (flume-cli perf produce)" "$records" "$before" "$after" "$rate"
