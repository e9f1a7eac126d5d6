#!/usr/bin/env bash
# The SDK's Kafka client (issue 33) next to librdkafka and next to the SDK over Flume's own
# protocol, all into one release Flume broker with both listeners, pinned as compare.sh pins
# (broker on CPU 0, client on CPU 1). N x 100 B records, one partition, linger 5 ms, batches up
# to 1 MiB, acks all, idempotent, no compression:
#   produce: `flume-cli perf produce --broker kafka://…` (the SDK over Kafka); librdkafka with
#            the same settings (linger.ms 5, batch.size 1048576, acks all, enable.idempotence)
#            driven from Python (confluent-kafka, as benches/kafka-vs-native.sh installs it) and
#            from C (benches/rdkafka-bench.c, built here against the system's librdkafka-dev;
#            rows skipped when it does not build); `flume-cli perf produce --broker host:port`
#            (the SDK over Flume's protocol); each into a topic of its own;
#   consume: `flume-cli perf consume` over Kafka, librdkafka from Python (`consume(1000)` per
#            call: larger batches wait for more records than a fetch brings; fetch.queue.
#            backoff.ms 10, see below) and from C
#            (`rd_kafka_consumer_poll`), each assigned the partition from offset 0, and
#            `perf consume` over Flume's protocol, each reading the same N records.
# Each row runs ROUNDS times (default 3), the rows alternating within a round. Each line gives
# records/s (the client's own clock: first send to last acknowledgement; for librdkafka's
# consumers, from the first fetched batch to the last record), the client's CPU per record
# (utime + stime of the whole client process, all threads, from the cutime/cstime fields of
# /proc/<pid>/stat of the subshell that waited for it, i.e. what the kernel charged the client
# when it exited; its start-up included), and the load average at the start of the row. For
# librdkafka the CPU is split too: its own threads (rdk:*) and the thread that calls it (read
# by the driver from /proc/self/task/*/stat just before it exits). A summary gives each row's
# median. Not run by CI. The machine may be shared: the load averages say how much to trust
# a run.
#
# usage: benches/kafka-client.sh [records] [rounds]     (default 2000000 3)
#   FLUME_CACHE=dir    where the confluent-kafka venv is (made if missing; the same cache as
#                      tests/kafka-clients/run.sh, default ${TMPDIR:-/tmp}/flume-ci-cache)
#   ONLY=produce|consume   one half only
#   FLUME_CLI=path     this flume-cli instead of a fresh release build (to compare two builds)
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-2000000}
rounds=${2:-3}
only=${ONLY:-}
if [ -n "${FLUME_CLI:-}" ]; then
  bin=$(realpath "$FLUME_CLI")
else
  cargo build --release -q -p flume-cli
  bin=$PWD/target/release/flume-cli
fi
cache=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
venv=$cache/kafka-clients-venv
py=$venv/bin/python
if ! [ -x "$py" ] || ! "$py" -c 'import confluent_kafka' 2>/dev/null; then
  echo "installing confluent-kafka into $venv" >&2
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$py" -m pip install -q --disable-pip-version-check --only-binary=:all: confluent-kafka==2.16.1
fi

# librdkafka from C too (benches/rdkafka-bench.c against the system's librdkafka-dev): the
# same settings without Python in the loop. Skipped when it does not build.
rdbench=$(mktemp)
if ! cc -O2 -o "$rdbench" benches/rdkafka-bench.c -lrdkafka 2>/dev/null; then
  echo "note: benches/rdkafka-bench.c does not build (apt-get install librdkafka-dev): no C rows" >&2
  rm -f "$rdbench"
  rdbench=
fi

data=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
kport=$(free_port)
while [ "$kport" = "$port" ]; do kport=$(free_port); done
taskset -c 0 "$bin" broker --host 127.0.0.1 --port "$port" --kafka-port "$kport" --data "$data" >"$data.log" 2>&1 &
pid=$!
stop_broker() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
results=$(mktemp)
trap 'stop_broker; rm -rf "$data" "$data.log" "$results" "$rdbench"' EXIT
for _ in $(seq 1 200); do
  (exec 3<>/dev/tcp/127.0.0.1/$kport) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.05
done
native="127.0.0.1:$port"
kafka="kafka://127.0.0.1:$kport"
tck=$(getconf CLK_TCK)
load() { cut -d' ' -f1-3 /proc/loadavg; }
json_rate() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["records_per_s"])'; }

# Runs "$@" on CPU 1 in a subshell that waits for it and then prints, on its last line, the
# CPU ticks its children used (cutime + cstime of /proc/<subshell>/stat: the client's own
# utime + stime, every thread, counted when it was reaped). The client's output comes first.
timed_client() {
  (
    taskset -c 1 "$@"
    awk '{print "TICKS", $16 + $17}' "/proc/$BASHPID/stat"
  )
}

# row NAME KIND RATE TICKS [EXTRA]: one result line, kept for the summary.
row() {
  local name=$1 rate=$2 ticks=$3 extra=${4:-} l=$5
  awk -v n="$name" -v r="$rate" -v k="$ticks" -v t="$tck" -v N="$records" -v e="$extra" -v l="$l" 'BEGIN {
    printf "%-36s %10.0f records/s   client CPU %6.3f s = %5.2f us/record%s   (load %s)\n", n, r, k / t, 1e6 * k / t / N, e, l
  }'
  echo "$name|$rate|$ticks" >>"$results"
}

# The confluent-kafka producer, on CPU 1: prints records/s, then the CPU split.
rdkafka_produce() {
  timed_client "$py" - "127.0.0.1:$kport" "$1" "$records" <<'EOF'
import os, sys, time
from confluent_kafka import Producer
boot, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": boot, "linger.ms": 5, "batch.size": 1048576,
              "acks": "all", "enable.idempotence": True, "compression.type": "none"})
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
main = rdk = 0
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/stat") as f:
        s = f.read()
    name = s[s.index("(") + 1 : s.rindex(")")]
    fields = s[s.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if int(tid) == os.getpid():
        main += ticks
    elif name.startswith("rdk:"):
        rdk += ticks
print(f"{(n - 1) / t:.0f} {rdk} {main}")
EOF
}

rdkafka_consume() {
  timed_client "$py" - "127.0.0.1:$kport" "$1" "$records" <<'EOF'
import os, sys, time
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
boot, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# fetch.queue.backoff.ms: once its prefetch queue is full (Python reads slower than it
# fetches), librdkafka waits this long before fetching again; at its default (1 s) that wait
# is most of the run (2M records: 0.3 M/s, against 1.8 M/s at 10 ms).
c = Consumer({"bootstrap.servers": boot, "group.id": "bench-unused", "enable.auto.commit": False,
              "enable.partition.eof": False, "fetch.queue.backoff.ms": 10})
c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
got = 0
t0 = None
first = 0
while got < n:
    msgs = c.consume(1000, 10.0)
    if not msgs:
        sys.exit(f"no record for 10 s after {got}")
    for m in msgs:
        if m.error():
            sys.exit(str(m.error()))
    got += len(msgs)
    if t0 is None:
        # The clock starts once the first batch is in (the connection, the metadata and
        # the first fetch made): the records after it count in the rate.
        t0 = time.perf_counter()
        first = got
t = time.perf_counter() - t0
main = rdk = 0
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/stat") as f:
        s = f.read()
    name = s[s.index("(") + 1 : s.rindex(")")]
    fields = s[s.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if int(tid) == os.getpid():
        main += ticks
    elif name.startswith("rdk:"):
        rdk += ticks
c.close()  # after the threads' CPU is read: closing ends librdkafka's threads
print(f"{(got - first) / t:.0f} {rdk} {main}")
EOF
}

# rdkafka_c_produce TOPIC / rdkafka_c_consume TOPIC: the C driver, same output as above.
rdkafka_c_produce() { timed_client "$rdbench" produce "127.0.0.1:$kport" "$1" "$records"; }
rdkafka_c_consume() { timed_client "$rdbench" consume "127.0.0.1:$kport" "$1" "$records"; }

# sdk_produce BROKER TOPIC
sdk_produce() {
  timed_client "$bin" perf produce --broker "$1" --topic "$2" --records "$records" --record-size 100 \
    --linger-ms 5 --batch-bytes 1048576 --partitions-spread 1 --json
}

# sdk_consume BROKER TOPIC
sdk_consume() {
  timed_client "$bin" perf consume --broker "$1" --topic "$2" --records "$records" --json
}

# run_sdk NAME BROKER TOPIC produce|consume
run_sdk() {
  local l out rate ticks
  l=$(load)
  out=$("sdk_$4" "$2" "$3")
  rate=$(echo "$out" | grep -v '^TICKS' | json_rate)
  ticks=$(echo "$out" | awk '/^TICKS/ {print $2}')
  row "$1" "$rate" "$ticks" "" "$l"
}

# run_rdkafka NAME TOPIC produce|consume|c_produce|c_consume
run_rdkafka() {
  local l out rate ticks rdk main
  l=$(load)
  out=$("rdkafka_$3" "$2")
  read -r rate rdk main < <(echo "$out" | grep -v '^TICKS' | tail -1)
  ticks=$(echo "$out" | awk '/^TICKS/ {print $2}')
  row "$1" "$rate" "$ticks" "$(awk -v a="$rdk" -v b="$main" -v t="$tck" -v N="$records" 'BEGIN {
    printf " (librdkafka threads %.2f, calling thread %.2f us/record)", 1e6 * a / t / N, 1e6 * b / t / N }')" "$l"
}

"$bin" topics create source --partitions 1 --broker "$native" >/dev/null
echo "== $records x 100 B records per row, $rounds rounds; broker CPU 0, client CPU 1; $(nproc) CPUs"
for r in $(seq 1 "$rounds"); do
  echo "-- round $r"
  if [ "$only" != consume ]; then
    for t in k$r l$r c$r f$r; do "$bin" topics create "p-$t" --partitions 1 --broker "$native" >/dev/null; done
    run_sdk     "produce: SDK over Kafka" "$kafka" "p-k$r" produce
    run_rdkafka "produce: librdkafka (confluent-kafka)" "p-l$r" produce
    [ -n "$rdbench" ] && run_rdkafka "produce: librdkafka (C)" "p-c$r" c_produce
    run_sdk     "produce: SDK over Flume's protocol" "$native" "p-f$r" produce
  fi
  if [ "$only" != produce ]; then
    if [ "$r" = 1 ]; then
      # What the consumers read: the same N records, written once.
      "$bin" perf produce --broker "$native" --topic source --records "$records" --record-size 100 \
        --linger-ms 5 --partitions-spread 1 --json >/dev/null
    fi
    run_sdk     "consume: SDK over Kafka" "$kafka" source consume
    run_rdkafka "consume: librdkafka (confluent-kafka)" source consume
    [ -n "$rdbench" ] && run_rdkafka "consume: librdkafka (C)" source c_consume
    run_sdk     "consume: SDK over Flume's protocol" "$native" source consume
  fi
done
echo "== medians ($rounds runs each)"
awk -F'|' -v t="$tck" -v N="$records" '
  { rates[$1] = rates[$1] " " $2; cpu[$1] = cpu[$1] " " $3; if (!($1 in seen)) { order[++k] = $1; seen[$1] = 1 } }
  function median(s,   a, n, i, j, x) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END { for (i = 1; i <= k; i++) printf "%-36s %10.0f records/s   client %5.2f us/record\n", order[i], median(rates[order[i]]), 1e6 * median(cpu[order[i]]) / t / N }
' "$results"
