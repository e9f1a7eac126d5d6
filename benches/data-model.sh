#!/usr/bin/env bash
# Both protocols' produce and consume of 100 B records through one broker
# binary, pinned as compare.sh pins (broker CPU 0, client CPU 1): records/s
# and the broker's CPU seconds per million records (utime + stime from
# /proc/<pid>/stat around each run). For comparing two builds in one
# sitting (issue #31: Kafka batches stored as produced), run it once per
# binary, alternating. Not run by CI.
#
#   benches/data-model.sh [BIN] [records]     (default: target/release/flume-cli, 1000000)
#
# Rows: native produce and consume (flume-cli perf); Kafka produce with
# librdkafka (confluent-kafka, linger.ms 5, acks all) uncompressed and lz4;
# Kafka consume (confluent-kafka, one partition from the start) of each; and
# Flume's consumer (flume-cli perf consume) reading the Kafka-produced
# topics (what a Flume consumer of Kafka producers' data costs).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/flume-cli}
records=${2:-1000000}
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
port=$(free_port); kport=$(free_port)
while [ "$kport" = "$port" ]; do kport=$(free_port); done
taskset -c 0 "$bin" broker --host 127.0.0.1 --port "$port" --kafka-port "$kport" --data "$data" >"$data.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 200); do
  (exec 3<>/dev/tcp/127.0.0.1/$kport) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.05
done
b="--broker 127.0.0.1:$port"
for t in native kplain klz4; do "$bin" topics create "$t" --partitions 1 $b >/dev/null; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
row() { # name rate ticks_before ticks_after
  awk -v n="$1" -v r="$records" -v rate="$2" -v a="$3" -v b="$4" -v t="$tck" 'BEGIN {
    printf "%-44s %10.0f records/s   broker %.3f s CPU per million\n", n, rate, (b - a) / t / (r / 1e6) }'
}
rate_of() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["records_per_s"])'; }

k_produce() { # topic codec
  taskset -c 1 "$py" - "127.0.0.1:$kport" "$1" "$records" "$2" <<'PY'
import sys, time
from confluent_kafka import Producer
boot, topic, n, codec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
p = Producer({"bootstrap.servers": boot, "linger.ms": 5, "compression.type": codec})
errors = []
def done(err, msg):
    if err is not None:
        errors.append(err)
value = b"x" * 60 + b"0123456789" * 4
p.produce(topic, value, partition=0, on_delivery=done)
p.flush(30)
t0 = time.perf_counter()
for i in range(n - 1):
    while True:
        try:
            p.produce(topic, value, key=b"key-%d" % (i % 1000), partition=0, on_delivery=done)
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
PY
}
k_consume() { # topic
  taskset -c 1 "$py" - "127.0.0.1:$kport" "$1" "$records" <<'PY'
import sys, time
from confluent_kafka import Consumer, TopicPartition
boot, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": boot, "group.id": "bench", "enable.auto.commit": False})
c.assign([TopicPartition(topic, 0, 0)])
got = 0
t0 = None
deadline = time.time() + 120
while got < n and time.time() < deadline:
    for m in c.consume(10000, 1.0):
        if m.error() is None:
            got += 1
            if t0 is None:
                t0 = time.perf_counter()
t = time.perf_counter() - t0
c.close()
if got < n:
    sys.exit(f"only {got} of {n} records")
print(f"{(got - 1) / t:.0f}")
PY
}

echo "== $("$bin" --version | head -1) ($bin), $records records of 100 B, load $(cut -d' ' -f1-3 /proc/loadavg)"
c0=$(cpu); r=$(taskset -c 1 "$bin" perf produce $b --topic native --records "$records" --record-size 100 --partitions-spread 1 --json | rate_of); row "native produce (flume-cli perf)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(taskset -c 1 "$bin" perf consume $b --topic native --records "$records" --json | rate_of); row "native consume (flume-cli perf)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(k_produce kplain none); row "Kafka produce, uncompressed (librdkafka)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(k_produce klz4 lz4); row "Kafka produce, lz4 (librdkafka)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(k_consume kplain); row "Kafka consume, uncompressed (librdkafka)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(k_consume klz4); row "Kafka consume, lz4-produced (librdkafka)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(taskset -c 1 "$bin" perf consume $b --topic kplain --records "$records" --json | rate_of); row "Flume consume of Kafka-produced, uncompressed" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(taskset -c 1 "$bin" perf consume $b --topic klz4 --records "$records" --json | rate_of); row "Flume consume of Kafka-produced, lz4" "$r" "$c0" "$(cpu)"
du -sk "$data/kplain" "$data/klz4" | awk '{printf "on disk: %s %d KiB\n", $2, $1}'
