#!/usr/bin/env bash
# CPU a broker burns with many idle connections (issue #16: under 1 % of a core for 1,000).
# Each connection sends one METADATA request and reads its answer (so its adaptive spin has
# run once, as after any last request), then stays open and silent. The broker's utime+stime
# from /proc/<pid>/stat is read before and after the quiet window.
#
# usage: benches/idle-cpu.sh [connections] [seconds] [broker flags...]   (default 1000 10)
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:-1000}
secs=${2:-10}
shift 2 2>/dev/null || shift $#
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p flume-cli
bin=target/release/flume-cli
data=$(mktemp -d)
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999): no client socket holds it
taskset -c 0 "$bin" broker --port "$port" --data "$data" "$@" >/dev/null 2>&1 &
pid=$!
holder=
trap 'kill "$holder" 2>/dev/null || true; kill -INT "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"' EXIT
up=
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && up=1 && break; sleep 0.05; done
[ -n "$up" ] || { echo "the broker did not start on port $port" >&2; exit 1; }
ready=$(mktemp)
python3 - "$port" "$conns" "$ready" <<'PY' &
import resource, socket, struct, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100), hard))
# METADATA (8), request id 1, payload: an empty topic list.
req = struct.pack(">ihii", 10, 8, 1, 0)
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(req)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    s.recv(size, socket.MSG_WAITALL)
    socks.append(s)
open(ready, "w").write("ok")
while True:
    time.sleep(3600)
PY
holder=$!
until [ -s "$ready" ]; do
  kill -0 "$holder" 2>/dev/null || { echo "the idle connections could not be opened" >&2; exit 1; }
  sleep 0.1
done
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
sleep "$secs"
t1=$(ticks)
echo "broker (${*:-default settings}) with $conns idle connections: $((t1 - t0)) ticks of CPU in ${secs} s" \
  "= $(echo "scale=3; 100 * ($t1 - $t0) / $hz / $secs" | bc) % of a core (load average $(cut -d' ' -f1-3 /proc/loadavg))"
