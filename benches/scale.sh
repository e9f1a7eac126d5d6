#!/usr/bin/env bash
# Scale figures for docs/scale.md (data in benches/results/scale-*.json; issue 17), in one
# run with the release build, default broker settings (except --partitions 4 for auto-created topics):
#   - 12,500 topics of 4 partitions (50,000) created, each partition receiving records;
#   - idle RSS and KB per partition, open file descriptors;
#   - shutdown time, restart time until serving METADATA again;
#   - METADATA of all topics (time of one request, measured by the client in this script);
#   - produce spread over 10,000 partitions vs one partition (flume-cli perf produce);
#   - 10,000 connections held at once, each answered;
#   - 1,000 consumer groups of 10 members (flume-cli perf groups, on a broker of their own):
#     the broker's CPU while they idle, heartbeating at the default interval (on the SDK's
#     defaults, fetches waiting 5 s; then with Kafka's 500 ms), its RSS and fds, the time one group takes to be stable
#     again after a member leaves and one joins while all run, and the probe heartbeat round
#     trips of another group meanwhile.
# Not run by CI; takes a few minutes. The soft RLIMIT_NOFILE is raised to the hard limit
# (the broker needs max_open_files + max_connections + 64 = 26,448 descriptors by default,
# this script's client 10,000 more for the connection test).
#
# usage: benches/scale.sh            env: TOPICS (12500) SPREAD (10000) CONNS (10000) RECORDS (2000000)
#                                         GROUP_COUNT (1000) MEMBERS (10) GROUP_PARTITIONS (10) IDLE_SECS (30)
#                                         ONLY=groups or ONLY=produce: just that section
set -euo pipefail
cd "$(dirname "$0")/.."
topics=${TOPICS:-12500}
spread=${SPREAD:-10000}
conns=${CONNS:-10000}
records=${RECORDS:-2000000}
groups=${GROUP_COUNT:-1000}  # not GROUPS: bash sets that (the user's group ids)
members=${MEMBERS:-10}
group_partitions=${GROUP_PARTITIONS:-10}
idle_secs=${IDLE_SECS:-30}
only=${ONLY:-}
partitions=$((topics * 4))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo build --release -q -p flume-cli
bin=target/release/flume-cli
data=$(mktemp -d)
log=$(mktemp)
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999): no client socket holds it
addr=127.0.0.1:$port
pid=
# The broker needs max_open_files + max_connections + 64 descriptors (26,448 by default); on a
# machine whose hard limit is lower, the file cache is made smaller to fit, and the run says so.
hard=$(ulimit -Hn)
extra=()
if [ "$hard" != unlimited ] && [ "$hard" -lt 26448 ]; then
  mof=$((hard - 10000 - 64 - 500))
  extra=(--max-open-files "$mof")
  echo "note: hard RLIMIT_NOFILE is $hard < 26448 needed by the defaults: running with --max-open-files $mof"
fi
start_broker() {
  "$bin" broker --port "$port" --data "$data" --partitions 4 "${extra[@]}" >>"$log" 2>&1 &
  pid=$!
}
wait_port() {
  for _ in $(seq 1 2000); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return; sleep 0.005; done
  echo "broker did not start; log:" >&2; tail "$log" >&2; exit 1
}
stop_broker() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop_broker; rm -rf "$data" "$log"' EXIT
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
fds() { ls "/proc/$pid/fd" | wc -l; }
# Broker CPU (utime + stime) in clock ticks, and per record between two readings.
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
per_record() { echo "scale=2; 1000000 * ($2 - $1) / $(getconf CLK_TCK) / $records" | bc; }
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l | xargs printf '%.3f'; }

# A raw-protocol client (docs/protocol.md): METADATA timing and check, and many connections.
py=$(mktemp --suffix .py)
trap 'stop_broker; rm -rf "$data" "$log" "$py"' EXIT
cat >"$py" <<'EOF'
import socket, struct, sys, time, resource
host, port = sys.argv[2].rsplit(":", 1); port = int(port)
def frame(api, rid, payload): return struct.pack(">ihi", 6 + len(payload), api, rid) + payload
def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError("closed")
        b += c
    return bytes(b)
def response(s):
    size, = struct.unpack(">i", recv_exact(s, 4)); return recv_exact(s, size)
def metadata_all():
    s = socket.create_connection((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    best = None
    for _ in range(5):
        t = time.perf_counter(); s.sendall(frame(8, 1, struct.pack(">i", 0))); r = response(s)
        d = time.perf_counter() - t; best = d if best is None or d < best else best
    first = d
    pos = 4; err, n = struct.unpack_from(">hi", r, pos); pos += 6
    assert err == 0, err
    parts = empty = 0
    for _ in range(n):
        l, = struct.unpack_from(">h", r, pos); pos += 2 + l
        terr, np_ = struct.unpack_from(">hi", r, pos); pos += 6
        for _ in range(np_):
            p, start, end = struct.unpack_from(">iqq", r, pos); pos += 20
            parts += 1; empty += (end == 0)
    print(f"metadata_topics={n} metadata_partitions={parts} partitions_without_records={empty} "
          f"metadata_ms_best_of_5={best*1e3:.1f} metadata_response_bytes={len(r)+4}")
def connections(count):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []; t = time.perf_counter()
    req = frame(8, 7, struct.pack(">ih", 1, 5) + b"scale")  # METADATA of one missing topic
    for _ in range(count):
        s = socket.create_connection((host, port)); socks.append(s)
    for s in socks: s.sendall(req)
    ok = 0
    for s in socks:
        r = response(s); ok += struct.unpack_from(">i", r, 0)[0] == 7
    d = time.perf_counter() - t
    print(f"connections_open={len(socks)} answered={ok} seconds={d:.2f}", flush=True)
    sys.stdout.flush()
    input()  # held open until the script says go
    for s in socks: s.close()
{"metadata": metadata_all, "connections": lambda: connections(int(sys.argv[3]))}[sys.argv[1]]()
EOF

echo "== scale benchmark: $(nproc) cores, $(date -u +%FT%TZ); fd limit $(ulimit -Sn)/$(ulimit -Hn); load average $(cut -d' ' -f1-3 /proc/loadavg). The machine is shared: figures are indicative."
if [ -z "$only" ]; then
start_broker
wait_port
sleep 0.5
base_rss=$(rss_kb); base_fds=$(fds)
echo "empty broker: RSS $((base_rss / 1024)) MB, $base_fds fds"

echo "== $topics topics x 4 partitions, every partition gets 1 record (auto-create on produce)"
# In chunks of 1,250 topics, so that no PRODUCE request (at most --window records, each
# possibly creating a topic) runs into the client's 30 s request timeout.
t0=$(now)
chunk=1250
for ((c = 0; c * chunk < topics; c++)); do
  n=$((topics - c * chunk < chunk ? topics - c * chunk : chunk))
  "$bin" perf produce --broker "$addr" --topic "scale$c" --topics-spread "$n" --partitions-spread 4 \
    --records $((n * 4)) --record-size 100 --window 400 --json >/dev/null
done
t1=$(now)
echo "created and filled $partitions partitions in $(secs "$t0" "$t1") s"
# Idle: let the writers end and the broker settle.
sleep 3
rss=$(rss_kb); nfds=$(fds)
echo "idle with $partitions partitions: RSS $((rss / 1024)) MB ($(( (rss - base_rss) * 1000 / partitions / 1000 )).$(( (rss - base_rss) * 1000 / partitions % 1000 )) KB per partition over the empty broker), $nfds fds"
grep -E '^(VmHWM|RssAnon|RssFile)' "/proc/$pid/status" | tr -s ' \t' ' ' | paste -sd, | sed 's/^/  /'
t0=$(ticks); sleep 10; t1=$(ticks)
echo "idle CPU with $partitions partitions: $(echo "scale=1; 100 * ($t1 - $t0) / $(getconf CLK_TCK) / 10" | bc) % of a core over 10 s"

python3 "$py" metadata "$addr"

echo "== restart"
t0=$(now); stop_broker; t1=$(now)
echo "shutdown: $(secs "$t0" "$t1") s"
t0=$(now)
start_broker
until python3 "$py" metadata "$addr" >/dev/null 2>&1; do sleep 0.01; done
t1=$(now)
echo "restart until METADATA of all topics answered: $(secs "$t0" "$t1") s (includes the client's own start, ~30 ms)"
sleep 1
echo "after restart: RSS $(( $(rss_kb) / 1024 )) MB, $(fds) fds"

echo "== $conns connections"
fifo=$(mktemp -u); mkfifo "$fifo"
python3 "$py" connections "$addr" "$conns" <"$fifo" &
cpid=$!
exec 4>"$fifo"
for _ in $(seq 1 600); do
  [ "$(fds)" -ge "$conns" ] && break; sleep 0.1
done
sleep 2
echo "broker with $conns connections: RSS $(( $(rss_kb) / 1024 )) MB, $(fds) fds"
echo >&4; exec 4>&-
wait "$cpid"; rm -f "$fifo"
stop_broker
fi

if [ -z "$only" ] || [ "$only" = produce ]; then
  # A broker of its own (fresh data directory), pinned to CPU 0 and the client to CPU 1 as in
  # benches/compare.sh. Every spread partition is written in turn, so its file must stay in the
  # file cache (16,384 by default): on a machine whose hard fd limit cannot hold that and the
  # default 10,000 connections, this broker takes fewer connections instead (this run needs two).
  data=$(mktemp -d)
  extra=()
  if [ "$hard" != unlimited ] && [ "$hard" -lt 26448 ]; then
    extra=(--max-connections "$((hard - 16384 - 64 - 500))")
    echo "note: hard RLIMIT_NOFILE is $hard < 26448: the produce broker runs with ${extra[*]}"
  fi
  pin_broker=() pin_client=()
  if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    pin_broker=(taskset -c 0) pin_client=(taskset -c 1)
  fi
  "${pin_broker[@]}" "$bin" broker --port "$port" --data "$data" "${extra[@]}" >>"$log" 2>&1 &
  pid=$!
  wait_port
  echo "== produce: one partition vs spread over $spread partitions ($records records of 100 bytes, 1 producer, perf produce defaults: records in flight bounded by the producer's 32 MiB buffer)"
  "$bin" topics create single --partitions 1 --broker "$addr" >/dev/null
  "$bin" topics create spread --partitions "$spread" --broker "$addr" >/dev/null
  for run in 1 2; do
    # Throughput depends on the load; the broker's CPU per record is the steadier figure.
    t0=$(ticks)
    single=$("${pin_client[@]}" "$bin" perf produce --broker "$addr" --topic single --records "$records" --json)
    t1=$(ticks)
    echo "single: $single"
    echo "  broker CPU $(per_record "$t0" "$t1") us per record (load $(cut -d' ' -f1-3 /proc/loadavg))"
    t0=$(ticks)
    spreadr=$("${pin_client[@]}" "$bin" perf produce --broker "$addr" --topic spread --partitions-spread "$spread" --records "$records" --json)
    t1=$(ticks)
    echo "spread: $spreadr"
    echo "  broker CPU $(per_record "$t0" "$t1") us per record (load $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 - "$single" "$spreadr" "$run" <<'EOF'
import json, sys
a, b = (json.loads(x)["records_per_s"] for x in sys.argv[1:3])
print(f"run {sys.argv[3]}: spread / single = {b / a:.2f} ({b:,.0f} vs {a:,.0f} records/s)")
EOF
  done
  echo "RSS after produce: $(( $(rss_kb) / 1024 )) MB, $(fds) fds"
  stop_broker
  rm -rf "$data"
fi

if [ -z "$only" ] || [ "$only" = groups ]; then
  # A broker of its own (fresh data directory), so the figures are the groups' alone. One
  # connection per member: the broker holds groups*members connections plus a few (the admin
  # connection, the probe, a joining member while the leaver's closes), so max_connections is
  # raised just above the member count; the file cache shrinks to fit the fd limit if needed.
  echo "== $groups groups x $members members, topic of $group_partitions partitions (flume-cli perf groups)"
  rm -rf "$data"; data=$(mktemp -d)
  gconns=$((groups * members + 100))
  gextra=(--max-connections "$gconns")
  if [ "$hard" != unlimited ] && [ "$hard" -lt $((16384 + gconns + 64)) ]; then
    gextra+=(--max-open-files $((hard - gconns - 64 - 200)))
  fi
  "$bin" broker --port "$port" --data "$data" "${gextra[@]}" >>"$log" 2>&1 &
  pid=$!
  wait_port
  echo "broker flags: ${gextra[*]}; empty broker: RSS $(( $(rss_kb) / 1024 )) MB, $(fds) fds"
  # Twice: members on the SDK's defaults (fetches wait 5 s: each idle member asks again every
  # 5 s, heartbeats wait for a rebalance), then with Kafka's fetch wait of 500 ms (each idle
  # member's empty fetch comes back twice a second).
  for wait in default 500; do
    wflag=()
    [ "$wait" = default ] || wflag=(--fetch-wait-ms "$wait")
    "$bin" perf groups --broker "$addr" --broker-pid "$pid" --groups "$groups" --members "$members" \
      --topic-partitions "$group_partitions" --idle-secs "$idle_secs" --rebalances 5 \
      "${wflag[@]}" --group-prefix "w$wait" 2>&1 | grep -v '^progress'
    # The first run's members are gone with its process: wait until their sessions expire.
    sleep 12
    echo "after the wave, its members gone: RSS $(( $(rss_kb) / 1024 )) MB, $(fds) fds"
  done
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
