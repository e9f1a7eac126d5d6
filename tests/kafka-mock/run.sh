#!/usr/bin/env bash
# The SDK's Kafka client (kafka:// addresses) against Kafka-protocol brokers nobody here wrote:
#
#   1. librdkafka's mock cluster (three brokers; mock_cluster.c beside this file, built against
#      Debian's librdkafka-dev): tests/e2e_kafka_mock.rs, run by cargo test with FLUME_KAFKA_MOCK
#      naming the program: produce and consume across brokers, leaders moving while a producer
#      sends, a broker down and back, a group of SDK members and librdkafka consumers.
#   2. kcat and flume-cli over Flume's own Kafka listener, both ways: what `flume-cli produce
#      --broker kafka://...` writes, kcat reads; what kcat writes, `flume-cli consume --broker
#      kafka://...` and `flume-cli consume` over Flume's protocol read.
#
#   tests/kafka-mock/run.sh              both parts (the first through cargo test --test e2e)
#   tests/kafka-mock/run.sh --prepare    install and build the mock program; print its path
#   tests/kafka-mock/run.sh --interop    the second part only (tests/run-all.sh runs the
#                                        first inside its cargo test run, FLUME_KAFKA_MOCK set)
#
# Environment:
#   FLUME_CACHE=dir    where the mock program is built (default ${TMPDIR:-/tmp}/flume-ci-cache)
#   CARGO_TARGET_DIR   honoured (the e2e test binary and flume-cli are the ones cargo test built)
#
# Installs librdkafka-dev and kcat with apt when missing (once: the cache keeps the build).
# Output: `PASS|FAIL name` per part, then `N passed, N failed`; non-zero exit if any failed.
set -euo pipefail
MODE=${1:-all}
case "$MODE" in all | --prepare | --interop) ;; *) echo "error: unknown argument '$MODE'" >&2; exit 2 ;; esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flume-kafka-mock.XXXXXX")
PASSED=0
FAILED=0
BROKER_PID=
say() { echo "[kafka-mock] $*" >&2; }
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
cleanup() {
  if [ -n "$BROKER_PID" ]; then
    kill -TERM "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=()
[ -f /usr/include/librdkafka/rdkafka_mock.h ] || missing+=(librdkafka-dev)
command -v kcat >/dev/null || missing+=(kcat)
command -v gcc >/dev/null || missing+=(gcc)
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >"$WORK/apt.log" 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1 || {
    tail -n 20 "$WORK/apt.log" >&2
    fail "setup: apt-get install ${missing[*]}"
    echo "$PASSED passed, $FAILED failed"
    exit 1
  }
fi

# The mock program: built once into the cache, again when its source changes.
MOCK=$CACHE/kafka-mock/mock_cluster
mkdir -p "$CACHE/kafka-mock"
if [ ! -x "$MOCK" ] || [ "$HERE/mock_cluster.c" -nt "$MOCK" ]; then
  say "building $MOCK"
  gcc -O1 -Wall -Wextra -Werror -o "$MOCK" "$HERE/mock_cluster.c" -lrdkafka -lpthread >&2
fi
if [ "$MODE" = --prepare ]; then
  echo "$MOCK"
  exit 0
fi

# 1. The mock cluster, through the e2e tests.
if [ "$MODE" = all ]; then
  t0=$(date +%s)
  if (cd "$ROOT" && FLUME_KAFKA_MOCK=$MOCK cargo test --locked --test e2e e2e_kafka_mock -- --test-threads 3) \
    >"$WORK/mock.log" 2>&1; then
    pass "e2e_kafka_mock (librdkafka's mock cluster, 3 brokers; $(($(date +%s) - t0)) s)"
  else
    tail -n 40 "$WORK/mock.log" >&2
    fail "e2e_kafka_mock (librdkafka's mock cluster)"
  fi
fi

# 2. kcat and flume-cli over Flume's Kafka listener, both ways.
(cd "$ROOT" && cargo build --locked -p flume-cli) >"$WORK/build.log" 2>&1 || {
  tail -n 20 "$WORK/build.log" >&2
  fail "setup: cargo build -p flume-cli"
  echo "$PASSED passed, $FAILED failed"
  exit 1
}
FLUME=${CARGO_TARGET_DIR:-$ROOT/target}/debug/flume-cli
[[ "$FLUME" = /* ]] || FLUME=$ROOT/$FLUME
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
PORT=$(free_port)
KPORT=$(free_port)
while [ "$KPORT" = "$PORT" ]; do KPORT=$(free_port); done
"$FLUME" broker --host 127.0.0.1 --port "$PORT" --kafka-port "$KPORT" --data "$WORK/data" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
end=$((SECONDS + 20))
until port_open 127.0.0.1 "$KPORT"; do
  [ "$SECONDS" -lt "$end" ] || { fail "setup: the broker's Kafka port did not open"; echo "$PASSED passed, $FAILED failed"; exit 1; }
  sleep 0.05
done
K=kafka://127.0.0.1:$KPORT
N=127.0.0.1:$PORT
KCAT=(kcat -b "127.0.0.1:$KPORT" -m 10 -X socket.timeout.ms=5000)

interop() {
  "$FLUME" topics create sdk-to-kcat --partitions 3 --broker "$K" >/dev/null
  for i in $(seq 0 29); do echo "k$((i % 5)):v$i"; done >"$WORK/in"
  "$FLUME" produce --topic sdk-to-kcat --broker "$K" --key-separator : --compression lz4 <"$WORK/in" >/dev/null
  timeout 20 "${KCAT[@]}" -C -t sdk-to-kcat -o beginning -e -q -f '%k:%s\n' | sort >"$WORK/kcat-out"
  sort "$WORK/in" | cmp -s - "$WORK/kcat-out" || { echo "kcat read $(wc -l <"$WORK/kcat-out") of 30 records the SDK produced over Kafka"; return 1; }
  "$FLUME" topics create kcat-to-sdk --partitions 3 --broker "$N" >/dev/null
  "${KCAT[@]}" -P -t kcat-to-sdk -K: -z zstd -l "$WORK/in"
  for b in "$K" "$N"; do
    timeout 20 "$FLUME" consume --topic kcat-to-sdk --broker "$b" --offset earliest --format json |
      python3 -c 'import json, sys; print("\n".join(sorted(json.loads(l)["key"] + ":" + json.loads(l)["value"] for l in sys.stdin)))' \
        >"$WORK/sdk-out"
    sort "$WORK/in" | cmp -s - "$WORK/sdk-out" || { echo "flume-cli --broker $b read $(wc -l <"$WORK/sdk-out") of 30 records kcat produced"; return 1; }
  done
}
if msg=$(interop 2>&1); then
  pass "kcat <-> flume-cli over Flume's Kafka listener (kafka:// and Flume's protocol)"
else
  fail "kcat <-> flume-cli: $msg"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
