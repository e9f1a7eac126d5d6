#!/usr/bin/env bash
# Side-by-side figures for docs/performance.md (data in benches/results/): Flume (release
# build) next to Redis Streams, pinned the same way (server on CPU 0, client on CPU 1). Not run by CI; takes a few
# minutes.
#
# usage: benches/compare.sh [records]      (default 2000000)
#        benches/compare.sh --latency      (only the one-at-a-time, latency and idle-CPU rows)
set -euo pipefail
cd "$(dirname "$0")/.."
all=1
if [ "${1:-}" = --latency ]; then all=; shift; fi
records=${1:-2000000}
cargo build --release -q -p flume-cli
bin=target/release/flume-cli
# The scheduling floor beside the e2e rows (benches/sched_floor.rs).
floor=$(cargo bench --bench sched_floor --no-run 2>&1 | grep -o 'target/release/deps/sched_floor-[0-9a-f]*' | head -1)
redis=../shared/bench/redis-streams.sh
data=$(mktemp -d)
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999): no client socket holds it
pid=
start_broker() {
  rm -rf "$data"/*
  taskset -c 0 "$bin" broker --port "$port" --data "$data" "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return; sleep 0.05; done
  echo "broker did not start" >&2; exit 1
}
stop_broker() { kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
rss() { grep VmHWM "/proc/$pid/status" | awk '{print $2/1024 " MB"}'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1-3 /proc/loadavg; }
# One-at-a-time produce with the CPU each side spent per round trip (utime+stime from /proc).
# usage: sync_run TOPIC [perf produce flags...]
sync_run() {
  local topic=$1 n=50000 b0 c0 cpid out
  shift
  b0=$(ticks "$pid")
  out=$(mktemp)
  $c produce $b --topic "$topic" --records "$n" --record-size 100 --sync "$@" >"$out" &
  cpid=$!
  # The client's ticks, read just before it exits (it is gone once `wait` returns).
  c0=0
  while kill -0 "$cpid" 2>/dev/null; do
    c0=$(ticks "$cpid" 2>/dev/null || echo "$c0"); sleep 0.05
  done
  wait "$cpid"
  cat "$out"; rm -f "$out"
  echo "  CPU per round trip: broker $(echo "scale=1; 1000000 * ($(ticks "$pid") - $b0) / $hz / $n" | bc) us," \
    "client >= $(echo "scale=1; 1000000 * $c0 / $hz / $n" | bc) us (load average $(load))"
}
trap 'stop_broker; rm -rf "$data"' EXIT
c="taskset -c 1 $bin perf"
# Guest memory this VM has never touched costs a host-side fault on first use, so a run that
# grows the page cache (or a heap) by a gigabyte is several times slower the first time than
# on a machine whose memory is already backed. Before each 10 KB run (1 GB), both systems get
# the same preparation: write and delete 3 GB, which leaves that much used-before memory free,
# then `sync` so no writeback of earlier runs competes with the measured one.
warm_memory() {
  local f
  f=$(mktemp)
  dd if=/dev/zero of="$f" bs=1M count=3072 status=none
  rm -f "$f"
  sync
}
b="--broker 127.0.0.1:$port"

echo "== Flume in one process (criterion round_trip/produce_100B, default settings and both sides off; load $(load))"
taskset -c 0,1 cargo bench -q --bench broker -- 'round_trip/produce_100B' 2>&1 | grep -E '^round_trip|time:' || true

echo "== Flume, 1,000 idle connections: broker CPU (default settings, then spinning off)"
benches/idle-cpu.sh 1000 10
benches/idle-cpu.sh 1000 10 --busy-poll-us 0

echo "== Redis Streams (same machine, same pinning; load $(load))"
if [ -x "$redis" ] || [ -f "$redis" ]; then
  bash "$redis" --pipeline 1 --records 50000 --runs 3
  if [ -n "$all" ]; then
    bash "$redis" --records 1000000 --runs 1
    bash "$redis" --fsync always --records 300000 --runs 1
    for i in 1 2 3; do
      warm_memory
      bash "$redis" --size 10240 --records 100000 --runs 1
    done
  fi
fi

echo "== Flume, fsync never (load $(load))"
start_broker
[ -z "$all" ] || $c produce $b --topic p100 --records "$records" --record-size 100
# Latency-bound runs: three each (the results take the median). Default settings: both sides
# spin adaptively.
for i in 1 2 3; do sync_run psync; done
for i in 1 2 3; do sync_run pspin --busy-poll-us 50; done
[ -z "$all" ] || $c consume $b --topic p100 --records "$records"
for i in 1 2 3; do $c e2e $b --topic "e2e$i" --records 200000 --rate 50000; echo "  (load average $(load))"; done
# What the broker's CPU allows: a thread that only wakes on the same 20 us schedule,
# alone on CPU 0 and with CPU 1 kept busy (the e2e client keeps it busy).
for i in 1 2 3; do taskset -c 0 "$floor" 200000 50000; done
for i in 1 2 3; do
  taskset -c 1 "$floor" --spin 5 & spin=$!
  echo -n "(CPU 1 busy) "; taskset -c 0 "$floor" 200000 50000
  wait "$spin"
done
# The whole e2e path done by bare threads (benches/sched_floor.rs --relay): a paced sender and a
# receiver on CPU 1, a thread on CPU 0 that appends each message to a file and sends it back.
for i in 1 2 3; do
  relay_addr=127.0.0.1:$((port + 1))
  taskset -c 0 "$floor" --relay-server "$relay_addr" & relay=$!
  taskset -c 1 "$floor" --relay "$relay_addr" 200000 50000 || kill "$relay" 2>/dev/null || true
  wait "$relay" || true
done
# The floor under all of these (benches/sched_floor.rs --hiccup): a thread that makes no
# syscall, only reads the clock, and counts the gaps when its CPU was taken from it: on CPU 0
# with CPU 1 idle, then on both CPUs at once as an e2e run keeps them.
echo -n "CPU 0, CPU 1 idle: "; taskset -c 0 "$floor" --hiccup 10
taskset -c 1 "$floor" --hiccup 10 >"$data.hiccup" & hic=$!
echo -n "CPU 0, both busy:  "; taskset -c 0 "$floor" --hiccup 10
wait "$hic"; echo -n "CPU 1, both busy:  "; cat "$data.hiccup"; rm -f "$data.hiccup"
# Last: the gigabytes they leave to write back would disturb the latency runs.
for i in 1 2 3; do
  [ -n "$all" ] || break
  warm_memory
  $c produce $b --topic "p10k$i" --records 100000 --record-size 10240
done
echo "broker peak RSS: $(rss)"
stop_broker

echo "== Flume, one at a time with both sides spinning (broker --busy-poll-us 50)"
start_broker --busy-poll-us 50
for i in 1 2 3; do sync_run pboth --busy-poll-us 50; done
stop_broker

echo "== Flume, one at a time with spinning off on both sides (--busy-poll-us 0)"
start_broker --busy-poll-us 0
for i in 1 2 3; do sync_run poff --busy-poll-us 0; done
for i in 1 2 3; do $c e2e $b --topic "e2eoff$i" --records 200000 --rate 50000 --busy-poll-us 0; done
stop_broker

[ -n "$all" ] || exit 0

echo "== Flume, fsync always (group commit), 4 producers"
start_broker --fsync always
$c produce $b --topic pa --records 1000000 --record-size 100 --producers 4
echo "broker peak RSS: $(rss)"
stop_broker

echo "== Flume, restart with 10M records in one partition"
start_broker
"$bin" topics create big --partitions 1 $b >/dev/null
$c produce $b --topic big --records 10000000 --record-size 100 >/dev/null
stop_broker
t0=$(date +%s.%N)
taskset -c 0 "$bin" broker --port "$port" --data "$data" >/dev/null 2>&1 &
pid=$!
until "$bin" consume $b --topic big --partition 0 --offset 9999999 --max 1 >/dev/null 2>&1; do sleep 0.01; done
t1=$(date +%s.%N)
echo "restart to first fetch of the last record: $(echo "$t1 - $t0" | bc) s ($(du -sh "$data/big" | cut -f1) on disk)"
stop_broker
