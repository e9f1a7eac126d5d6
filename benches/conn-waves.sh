#!/usr/bin/env bash
# Does the broker give memory back after connections close? Waves of connections: each opens
# N connections, sends one METADATA of a 2,000-partition topic on each (a response of about
# 40 KB, so each connection's buffers are touched), closes them all, then waits a few seconds;
# the broker's RSS is printed after each wave.
#
# usage: benches/conn-waves.sh [connections] [waves] [broker flags...]   (default 2000 3)
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-2000}
waves=${2:-3}
shift 2 2>/dev/null || shift $#
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p flume-cli
bin=target/release/flume-cli
data=$(mktemp -d)
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999): no client socket holds it
"$bin" broker --port "$port" --data "$data" "$@" >/dev/null 2>&1 &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
rss() { awk '/VmRSS/ {printf "%.0f MB", $2 / 1024}' "/proc/$pid/status"; }
"$bin" topics create --broker "127.0.0.1:$port" --partitions 2000 waves >/dev/null
echo "empty broker: $(rss)"
for w in $(seq 1 "$waves"); do
  python3 - "$port" "$conns" <<'PY'
import resource, socket, struct, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100), hard))
# METADATA (8), request id 1, payload: an empty topic list.
meta = struct.pack(">ihii", 10, 8, 1, 0)
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(meta)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    s.recv(size, socket.MSG_WAITALL)
    socks.append(s)
for s in socks:
    s.close()
PY
  sleep 3
  echo "after wave $w of $conns connections: $(rss)"
done
