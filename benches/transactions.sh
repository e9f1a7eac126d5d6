#!/usr/bin/env bash
# Transactions' cost, through the release broker's Kafka listener, pinned as compare.sh pins
# (broker CPU 0, client CPU 1), with librdkafka (confluent-kafka): 100 B records,
# linger.ms 5, acks all, into one-partition topics; records/s and the broker's CPU seconds
# per million records (utime + stime from /proc/<pid>/stat around each run). Not run by CI.
#
#   benches/transactions.sh [records]      (default 1000000; FLUME_BIN=path skips the build)
#
# Rows: an idempotent producer; a transactional one committing every 1,000 records; one
# committing every 100 ms; then a read_committed and a read_uncommitted consumer of the
# transactional topic. Producer-state recovery at start is benches/producer_recovery.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-1000000}
bin=${FLUME_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p flume-cli
  bin=target/release/flume-cli
fi
cache=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
py=$cache/kafka-clients-venv/bin/python
if ! [ -x "$py" ] || ! "$py" -c 'import confluent_kafka' 2>/dev/null; then
  echo "installing confluent-kafka into $cache/kafka-clients-venv" >&2
  mkdir -p "$cache"
  python3 -m venv "$cache/kafka-clients-venv"
  "$py" -m pip install -q --disable-pip-version-check --only-binary=:all: confluent-kafka==2.16.1
fi
data=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port); kport=$(free_port)
while [ "$kport" = "$port" ]; do kport=$(free_port); done
taskset -c 0 "$bin" broker --host 127.0.0.1 --port "$port" --kafka-port "$kport" --data "$data" >"$data.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$kport) 2>/dev/null && break; sleep 0.05; done
for t in idem tx1000 tx100ms; do "$bin" topics create "$t" --partitions 1 --broker "127.0.0.1:$port" >/dev/null; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
row() {
  awk -v n="$1" -v r="$records" -v rate="$2" -v a="$3" -v b="$4" -v t="$tck" 'BEGIN {
    printf "%-46s %10.0f records/s   broker %.3f s CPU per million\n", n, rate, (b - a) / t / (r / 1e6) }'
}
produce() { # topic mode (idempotent | every N | ms N)
  taskset -c 1 "$py" - "127.0.0.1:$kport" "$records" "$@" <<'PY'
import sys, time
from confluent_kafka import Producer
boot, n, topic, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
conf = {"bootstrap.servers": boot, "linger.ms": 5, "enable.idempotence": True}
tx = mode != "idempotent"
if tx:
    conf["transactional.id"] = f"bench-{topic}"
p = Producer(conf)
if tx:
    p.init_transactions(30)
value = b"x" * 100
t0 = time.perf_counter()
last = t0
if tx:
    p.begin_transaction()
for i in range(n):
    while True:
        try:
            p.produce(topic, value, partition=0)
            break
        except BufferError:
            p.poll(0.001)
    if i % 10000 == 0:
        p.poll(0)
    if tx and ((mode == "every" and (i + 1) % every == 0) or
               (mode == "ms" and time.perf_counter() - last >= every / 1000)):
        p.commit_transaction(30)
        p.begin_transaction()
        last = time.perf_counter()
if tx:
    p.commit_transaction(30)
else:
    p.flush(60)
print(f"{n / (time.perf_counter() - t0):.0f}")
PY
}
consume() { # topic isolation
  taskset -c 1 "$py" - "127.0.0.1:$kport" "$records" "$@" <<'PY'
import sys, time
from confluent_kafka import Consumer, TopicPartition
boot, n, topic, isolation = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = Consumer({"bootstrap.servers": boot, "group.id": "bench", "enable.auto.commit": False,
              "isolation.level": isolation})
c.assign([TopicPartition(topic, 0, 0)])
got, t0 = 0, None
deadline = time.time() + 120
while got < n and time.time() < deadline:
    for m in c.consume(10000, 1.0):
        if m.error() is None:
            got += 1
            t0 = t0 or time.perf_counter()
print(f"{got / (time.perf_counter() - t0):.0f}" if got >= n else "0")
PY
}
echo "== transactions, $records records of 100 B (load $(cut -d' ' -f1-3 /proc/loadavg))"
c0=$(cpu); r=$(produce idem idempotent); row "idempotent producer" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(produce tx1000 every 1000); row "transactional, a commit every 1,000 records" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(produce tx100ms ms 100); row "transactional, a commit every 100 ms" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(consume tx1000 read_uncommitted); row "read_uncommitted consumer (of tx1000)" "$r" "$c0" "$(cpu)"
c0=$(cpu); r=$(consume tx1000 read_committed); row "read_committed consumer (of tx1000)" "$r" "$c0" "$(cpu)"
