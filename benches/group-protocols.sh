#!/usr/bin/env bash
# Kafka's two group protocols on Flume's Kafka listener (issue #43): a group of 10 and of 100
# members (the SDK's GroupConsumer over kafka://) settling from empty and after one leaves,
# classic against consumer protocol, in one run; and the broker's CPU per idle member per
# second (its own process: its threads' CPU time from /proc). See benches/group_protocols.rs.
#
#   benches/group-protocols.sh [members=10,100] [runs=3] [idle seconds=10]
set -euo pipefail
cd "$(dirname "$0")/.."
members=${1:-10,100}
runs=${2:-3}
idle=${3:-10}
cargo build --release -q -p flume-cli
cargo bench --bench group_protocols --no-run >/dev/null 2>&1
data=$(mktemp -d)
kport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/flume-cli broker --host 127.0.0.1 --port 0 --kafka-port "$kport" --data "$data" --log-level warn &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$kport") 2>/dev/null && break; sleep 0.05; done
cargo bench -q --bench group_protocols -- --members "$members" --runs "$runs" --idle-s "$idle" \
    --bootstrap "127.0.0.1:$kport" --broker-pid "$pid" 2>/dev/null
