#!/usr/bin/env bash
# Real Kafka clients against Flume's Kafka listener (issue #14): kcat, confluent-kafka,
# kafka-python, kafkajs and @platformatic/kafka, none written here, and two stream-processing libraries that
# keep their state in compacted changelog topics (Quix Streams, faust-streaming). See
# README.md beside this file.
#
#   tests/kafka-clients/run.sh                 install (cached), build, start a broker, run every client
#   tests/kafka-clients/run.sh --install-only  only install the clients into the cache
#
# Environment:
#   KAFKA_CLIENTS=kcat,confluent,kafka-python,kafkajs,quixstreams,faust,share,consumer-protocol,platformatic
#                                     the clients to run (default: all of these); `share` is
#                                     confluent-kafka's ShareConsumer (share_test.py, issue #44, and
#                                     tests/chaos/share_queue.py under failures); `consumer-protocol`
#                                     is confluent-kafka's Consumer with group.protocol=consumer
#                                     (KIP-848, consumer_protocol_test.py); `platformatic` is
#                                     @platformatic/kafka, consumer-protocol and classic groups
#                                     (platformatic_test.mjs)
#   FLUME_CLI=path                    the flume-cli binary to run (default: cargo build -p flume-cli
#                                     --locked, then ${CARGO_TARGET_DIR:-target}/debug/flume-cli)
#   FLUME_KAFKA_BOOTSTRAP=host:port   use this running Kafka-protocol broker instead of starting
#                                     one (the cross-protocol scenarios are skipped then)
#   FLUME_CACHE=dir                   install cache (default ${TMPDIR:-/tmp}/flume-ci-cache)
#   CARGO_TARGET_DIR                  honoured when building flume-cli
#   KAFKA_CLIENTS_DEADLINE_S=25       how long one wait inside a scenario may take
#
# Output: one `PASS|FAIL <client> <scenario>` line per scenario, then `N passed, N failed`;
# the exit status is non-zero if anything failed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
ALL_CLIENTS=kcat,confluent,kafka-python,kafkajs,quixstreams,faust,share,consumer-protocol,platformatic
KNOWN_CLIENTS=$ALL_CLIENTS
CLIENTS=${KAFKA_CLIENTS:-$ALL_CLIENTS}
BOOTSTRAP=${FLUME_KAFKA_BOOTSTRAP:-}
export KAFKA_CLIENTS_DEADLINE_S=${KAFKA_CLIENTS_DEADLINE_S:-25}
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ beside the scenario files
DEADLINE_S=$KAFKA_CLIENTS_DEADLINE_S

# Pinned client versions (each installs as a wheel / plain npm package here).
CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_PYTHON_VERSION=3.0.12
KAFKAJS_VERSION=2.2.4
# Its package.json wants Node >= 22.22; platformatic_test.mjs polyfills what Node 20 lacks.
PLATFORMATIC_KAFKA_VERSION=2.12.1
# The stream-processing libraries and every one of their dependencies are pinned in
# stream-requirements.txt; uv installs them (pip fetches one package at a time: 67 here).
UV_VERSION=0.13.9

INSTALL_ONLY=0
case "${1:-}" in
  --install-only) INSTALL_ONLY=1 ;;
  "") ;;
  -h | --help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

PASSED=0
FAILED=0
say() { echo "[kafka-clients] $*" >&2; }
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
summary() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}
# A failure before any scenario could run: one line saying why, the summary, exit 1.
die() {
  fail "setup: $*"
  summary || exit 1
}

want() { [[ ",$CLIENTS," == *",$1,"* ]]; }
IFS=, read -r -a requested <<<"$CLIENTS"
for c in "${requested[@]}"; do
  [[ ",$KNOWN_CLIENTS," == *",$c,"* ]] || { echo "error: unknown client '$c' in KAFKA_CLIENTS (known: $KNOWN_CLIENTS)" >&2; exit 2; }
done

# ---------------------------------------------------------------------------
# Processes and temp dirs: every one is cleaned on exit.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flume-kafka-clients.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    # Give each a moment to stop cleanly, then force it.
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "${KEEP_WORK:-}" ]; then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

# ---------------------------------------------------------------------------
# Install (cached): kcat from Debian, one venv with both Python clients, kafkajs via npm.
install_kcat() {
  command -v kcat >/dev/null && return 0
  say "installing kcat (apt)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >"$WORK/apt.log" 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends kcat >>"$WORK/apt.log" 2>&1 || {
    tail -n 20 "$WORK/apt.log" >&2
    return 1
  }
}

VENV=$CACHE/kafka-clients-venv
PY=$VENV/bin/python
install_python() {
  local pins="confluent-kafka==$CONFLUENT_KAFKA_VERSION kafka-python==$KAFKA_PYTHON_VERSION"
  if [ -x "$PY" ] && [ "$(cat "$VENV/.flume-pins" 2>/dev/null)" = "$pins" ]; then return 0; fi
  say "installing $pins into $VENV"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  local -a reqs
  read -r -a reqs <<<"$pins"
  python3 -m venv "$VENV" >"$WORK/pip.log" 2>&1 &&
    "$PY" -m pip install -q --disable-pip-version-check --only-binary=:all: "${reqs[@]}" >>"$WORK/pip.log" 2>&1 || {
    tail -n 20 "$WORK/pip.log" >&2
    return 1
  }
  echo "$pins" >"$VENV/.flume-pins"
}

NPM_PREFIX=$CACHE/kafka-clients-npm
install_kafkajs() {
  command -v node >/dev/null || { say "node is required for kafkajs"; return 1; }
  local have
  have=$(node -p "require('$NPM_PREFIX/node_modules/kafkajs/package.json').version" 2>/dev/null || true)
  [ "$have" = "$KAFKAJS_VERSION" ] && return 0
  say "installing kafkajs@$KAFKAJS_VERSION into $NPM_PREFIX"
  mkdir -p "$NPM_PREFIX"
  npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --no-save --loglevel=error "kafkajs@$KAFKAJS_VERSION" >"$WORK/npm.log" 2>&1 || {
    tail -n 20 "$WORK/npm.log" >&2
    return 1
  }
}

# @platformatic/kafka in an npm prefix of its own: `npm install --no-save` in kafkajs's prefix
# removes what an earlier --no-save install put there (kafkajs), so each would reinstall the
# other on every run. Its own dependencies are npm's newest within the package's ^ ranges at
# install time (the top level is pinned, as kafkajs, which has none).
PF_PREFIX=$CACHE/kafka-clients-npm-platformatic
install_platformatic() {
  command -v node >/dev/null || { say "node is required for @platformatic/kafka"; return 1; }
  local have
  have=$(node -p "require('$PF_PREFIX/node_modules/@platformatic/kafka/package.json').version" 2>/dev/null || true)
  [ "$have" = "$PLATFORMATIC_KAFKA_VERSION" ] && return 0
  say "installing @platformatic/kafka@$PLATFORMATIC_KAFKA_VERSION into $PF_PREFIX"
  mkdir -p "$PF_PREFIX"
  npm install --prefix "$PF_PREFIX" --no-audit --no-fund --no-save --loglevel=error \
    "@platformatic/kafka@$PLATFORMATIC_KAFKA_VERSION" >"$WORK/npm-platformatic.log" 2>&1 || {
    tail -n 20 "$WORK/npm-platformatic.log" >&2
    return 1
  }
}

# Quix Streams and faust-streaming in one venv (their dependencies do not overlap where
# it matters), installed by uv: pip fetches and installs one package after another
# (measured here: 87-106 s for Quix Streams' 43 packages), uv in parallel (3-5 s for all
# 67). uv itself is one wheel, installed with pip into the cache.
SVENV=$CACHE/kafka-stream-venv
SPY=$SVENV/bin/python
UV=$CACHE/uv-$UV_VERSION/bin/uv
install_stream() {
  local pins
  pins="uv==$UV_VERSION $(sha256sum <"$HERE/stream-requirements.txt" | cut -c1-16)"
  if [ -x "$SPY" ] && [ "$(cat "$SVENV/.flume-pins" 2>/dev/null)" = "$pins" ]; then return 0; fi
  say "installing the stream-processing libraries (stream-requirements.txt) into $SVENV"
  mkdir -p "$CACHE"
  if [ ! -x "$UV" ]; then
    rm -rf "$CACHE/uv-$UV_VERSION"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --only-binary=:all: \
      --target "$CACHE/uv-$UV_VERSION" "uv==$UV_VERSION" >"$WORK/uv.log" 2>&1 || {
      tail -n 20 "$WORK/uv.log" >&2
      return 1
    }
  fi
  rm -rf "$SVENV"
  "$UV" venv -q --python python3 "$SVENV" >"$WORK/stream-pip.log" 2>&1 &&
    "$UV" pip install -q --python "$SPY" --cache-dir "$CACHE/uv-cache" --only-binary=:all: \
      -r "$HERE/stream-requirements.txt" >>"$WORK/stream-pip.log" 2>&1 || {
    tail -n 20 "$WORK/stream-pip.log" >&2
    return 1
  }
  echo "$pins" >"$SVENV/.flume-pins"
}

timed() { # name command...: runs it, appends "name Ns" to INSTALL_TIMES
  local t0 t1
  t0=$(date +%s.%N)
  "${@:2}" || return 1
  t1=$(date +%s.%N)
  INSTALL_TIMES+=("$1 $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1fs", b - a }')")
}

install_all() {
  INSTALL_TIMES=()
  if want kcat; then timed kcat install_kcat || die "could not install kcat (apt-get install kcat)"; fi
  # kcat has no OffsetFetch (nor CreateTopics): its scenarios use kafka_admin.py for those.
  if want confluent || want kafka-python || want kcat || want share || want consumer-protocol; then
    timed python install_python || die "could not install the Python clients (pip)"
  fi
  if want kafkajs; then timed kafkajs install_kafkajs || die "could not install kafkajs (npm)"; fi
  if want platformatic; then
    timed platformatic install_platformatic || die "could not install @platformatic/kafka (npm)"
  fi
  if want quixstreams || want faust; then
    timed stream install_stream || die "could not install the stream-processing libraries (uv)"
  fi
  say "install (cache $CACHE): ${INSTALL_TIMES[*]:-nothing to install}"
}

if [ "$INSTALL_ONLY" -eq 1 ]; then
  install_all
  exit 0
fi

# ---------------------------------------------------------------------------
# The broker: flume-cli with its Kafka listener, on free ports, in a temp dir.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

FLUME=
NATIVE=
if [ -z "$BOOTSTRAP" ] && [ -n "${FLUME_CLI:-}" ]; then
  FLUME=$FLUME_CLI
  [ -x "$FLUME" ] || die "FLUME_CLI=$FLUME is not an executable"
  say "using $FLUME (FLUME_CLI; no build)"
elif [ -z "$BOOTSTRAP" ]; then
  say "building flume-cli"
  if ! (cd "$ROOT" && cargo build -p flume-cli --locked) >"$WORK/build.log" 2>&1; then
    tail -n 30 "$WORK/build.log" >&2
    die "cargo build -p flume-cli --locked failed"
  fi
  FLUME=${CARGO_TARGET_DIR:-$ROOT/target}/debug/flume-cli
  [[ "$FLUME" = /* ]] || FLUME=$ROOT/$FLUME
fi
if [ -n "$FLUME" ]; then
  if ! "$FLUME" broker --help 2>/dev/null | grep -q -- '--kafka-port'; then
    die "flume-cli broker does not accept --kafka-port yet (issue #14: the Kafka listener is not built)"
  fi
fi

install_all

if [ -z "$BOOTSTRAP" ]; then
  PORT=$(free_port)
  KPORT=$(free_port)
  while [ "$KPORT" = "$PORT" ]; do KPORT=$(free_port); done
  mkdir -p "$WORK/data"
  # Sessions down to 1 s, as Kafka's test fixtures lower group.min.session.timeout.ms
  # (kafka-python's own test_group joins with 3000 ms).
  "$FLUME" broker --host 127.0.0.1 --port "$PORT" --kafka-port "$KPORT" --data "$WORK/data" \
    --group-min-session-timeout-ms 1000 >"$WORK/broker.log" 2>&1 &
  BROKER_PID=$!
  PIDS+=("$BROKER_PID")
  end=$((SECONDS + 20))
  until port_open 127.0.0.1 "$KPORT" && port_open 127.0.0.1 "$PORT"; do
    if ! kill -0 "$BROKER_PID" 2>/dev/null; then
      tail -n 20 "$WORK/broker.log" >&2
      die "the broker exited before its Kafka port $KPORT accepted connections"
    fi
    [ "$SECONDS" -lt "$end" ] || die "the broker's Kafka port $KPORT did not accept connections within 20s"
    sleep 0.05
  done
  BOOTSTRAP=127.0.0.1:$KPORT
  NATIVE=127.0.0.1:$PORT
  # For scenarios that also look with flume-cli (both of its protocols).
  export FLUME_CLI=$FLUME FLUME_NATIVE=$NATIVE
  say "broker: native $NATIVE, kafka $BOOTSTRAP, data $WORK/data"
else
  say "using the running broker at $BOOTSTRAP (cross-protocol scenarios skipped)"
fi

PREFIX=kc$(date +%s)$$
mkdir -p "$WORK/logs"

# Before any client: the port must answer ApiVersions v0 at all (else one line, in seconds).
if ! probe_msg=$(python3 "$HERE/probe.py" "$BOOTSTRAP" 10 2>"$WORK/logs/probe.err"); then
  die "$probe_msg"
fi
say "$(cat "$WORK/logs/probe.err")"

# ---------------------------------------------------------------------------
# Runs one client's scenario file; its PASS/FAIL lines are counted. A client that dies
# or hangs without reporting every scenario is failed for the ones it did not report.
run_client() { # name expected-scenarios command...
  local name=$1 expected=$2 out code=0 p f
  shift 2
  out=$WORK/logs/$name.out
  say "running $name"
  timeout -k 5 180 "$@" >"$out" 2>"$WORK/logs/$name.err" || code=$?
  cat "$out"
  p=$(grep -c '^PASS ' "$out" || true)
  f=$(grep -c '^FAIL ' "$out" || true)
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  if [ $((p + f)) -lt "$expected" ]; then
    fail "$name harness: reported $((p + f)) of $expected scenarios (exit code $code; last stderr lines below)"
    tail -n 15 "$WORK/logs/$name.err" >&2
  elif [ "$code" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$name harness: exit code $code with no failed scenario"
  elif [ "$f" -gt 0 ]; then
    say "$name: stderr in $WORK/logs/$name.err (last lines):"
    tail -n 15 "$WORK/logs/$name.err" >&2
    # A group that did not form: what each member process and the coordinator said.
    local m
    for m in "$WORK"/logs/"$name"-*.log; do
      [ -s "$m" ] || continue
      say "$(basename "$m") (last lines):"
      tail -n 25 "$m" >&2
    done
    say "broker: group events (last lines):"
    grep -E 'flume_broker::group|kafka' "$WORK/broker.log" | tail -n 40 >&2 || true
  fi
}

# ---------------------------------------------------------------------------
# kcat. Every call gets short timeouts; -m bounds metadata waits.
KCAT_X=(-m 10 -X socket.timeout.ms=5000 -X socket.connection.setup.timeout.ms=5000 -X topic.metadata.refresh.interval.ms=2000)

kcat_create_topic() { # topic partitions
  if [ "${KAFKA_CLIENTS_AUTO_CREATE:-}" = 1 ]; then
    # The broker creates it on first use (see README): a metadata request for it.
    kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -L -t "$1" >/dev/null
  elif [ -n "$NATIVE" ]; then
    timeout "$DEADLINE_S" "$FLUME" topics create "$1" --partitions "$2" --broker "$NATIVE" >/dev/null
  else
    "$PY" "$HERE/kafka_admin.py" create "$BOOTSTRAP" "$1" "$2"
  fi
}

# Partitions (space separated) of the last assignment a `kcat -G` printed on stderr.
kcat_assignment() {
  local line
  line=$(grep -E 'rebalanced.*(assigned|revoked):' "$1" 2>/dev/null | tail -n 1 || true)
  case "$line" in
    *assigned:*) echo "${line#*assigned:}" | grep -oE '\[[0-9]+\]' | tr -d '[]' | sort -n | tr '\n' ' ' ;;
    *) echo "" ;;
  esac
}

# Checks kcat's output (stdin) with kcat_check.py; prints the problems on one line.
check() { python3 "$HERE/kcat_check.py" "$@"; }
lines() { cat "$@" 2>/dev/null | grep -c . || true; } # non-empty lines of the files that exist

# A scenario in the shell: PASS if the function returns 0, else FAIL with what it printed.
kcat_scenario() { # name function args...
  local name=$1 msg t0 took
  t0=$(date +%s.%N)
  # Not in a subshell: the group members it starts must be known to the cleanup trap.
  if "${@:2}" >"$WORK/logs/kcat-$name.msg" 2>"$WORK/logs/kcat-$name.err"; then
    took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    pass "kcat $name (${took}s)"
  else
    msg=$(tr '\n' ' ' <"$WORK/logs/kcat-$name.msg")
    # The last line the failing tool printed on stderr, if any, says why.
    [ ! -s "$WORK/logs/kcat-$name.err" ] || msg="$msg($(tail -n 1 "$WORK/logs/kcat-$name.err"))"
    msg=$(printf '%s' "$msg" | cut -c1-400)
    fail "kcat $name: ${msg:-failed}"
  fi
}

KT=$PREFIX-kc
kcat_metadata() {
  local topic=$KT-meta end=$((SECONDS + DEADLINE_S))
  kcat_create_topic "$topic" 4 || { echo "could not create $topic"; return 1; }
  while :; do
    # All topics, as a bare `kcat -L` asks.
    kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -L -J >"$WORK/kcat-md.json" || { echo "kcat -L failed"; return 1; }
    check metadata "$topic" 4 <"$WORK/kcat-md.json" >"$WORK/kcat-md.problems" && return 0
    [ "$SECONDS" -lt "$end" ] || { cat "$WORK/kcat-md.problems"; return 1; }
    sleep 0.2
  done
}

kcat_produce() {
  local topic=$KT-rec i
  kcat_create_topic "$topic" 4 || { echo "could not create $topic"; return 1; }
  date +%s%3N >"$WORK/kcat-t0"
  # Keys k0..k4 three times each; two headers on every record.
  for i in $(seq 0 14); do printf '%s-k%d:%s-v%d\n' "$topic" $((i % 5)) "$topic" "$i"; done >"$WORK/kcat-in"
  kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -X message.timeout.ms=15000 -P -t "$topic" -K: -H h1=one -H "h2=two words" -l "$WORK/kcat-in" ||
    { echo "kcat -P failed (delivery reports in the log)"; return 1; }
  date +%s%3N >"$WORK/kcat-t1"
}

kcat_consume() {
  local topic=$KT-rec
  [ -s "$WORK/kcat-t1" ] || { echo "not run: the produce scenario failed"; return 1; }
  timeout "$DEADLINE_S" kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -C -t "$topic" -o beginning -e -J -q >"$WORK/kcat-rec.json" ||
    { echo "kcat -C failed or timed out"; return 1; }
  check consume "$topic" "$(cat "$WORK/kcat-t0")" "$(cat "$WORK/kcat-t1")" <"$WORK/kcat-rec.json"
}

kcat_compression() { # codec
  local codec=$1 topic=$KT-z$1 filler i
  kcat_create_topic "$topic" 1 || { echo "could not create $topic"; return 1; }
  filler=$(printf 'flume %.0s' $(seq 1 40))
  for i in $(seq 0 49); do printf 'k%d:%s-%d-%s\n' "$i" "$codec" "$i" "$filler"; done >"$WORK/kcat-z-in"
  # linger.ms: many records per (compressed) batch.
  kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -X message.timeout.ms=15000 -X linger.ms=50 -P -t "$topic" -p 0 -z "$codec" -K: -l "$WORK/kcat-z-in" ||
    { echo "kcat -P -z $codec failed"; return 1; }
  timeout "$DEADLINE_S" kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -C -t "$topic" -p 0 -o beginning -e -q -f '%k:%s\n' >"$WORK/kcat-z-out" ||
    { echo "kcat -C failed or timed out"; return 1; }
  cmp -s "$WORK/kcat-z-in" "$WORK/kcat-z-out" ||
    { echo "consumed $(lines "$WORK/kcat-z-out") records, not the 50 produced (in order, with keys)"; return 1; }
}

# Group of two `kcat -G` processes. Offsets are committed by librdkafka's auto commit
# (every 200 ms, and on close after SIGTERM).
KCAT_GROUP=$KT-group
KCAT_GTOPIC=$KT-grp
kcat_member() { # name: one member; output in $WORK/<name>.out (and .err), pid in $WORK/<name>.pid
  kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -G "$KCAT_GROUP" -X auto.offset.reset=earliest \
    -X session.timeout.ms=6000 -X heartbeat.interval.ms=500 -X max.poll.interval.ms=10000 \
    -X auto.commit.interval.ms=200 -X partition.assignment.strategy=range -X fetch.wait.max.ms=100 \
    -u -f '%p %o %s\n' "$KCAT_GTOPIC" >"$WORK/$1.out" 2>"$WORK/$1.err" &
  PIDS+=("$!")
  echo "$!" >"$WORK/$1.pid"
}

kcat_stop() { # names...: SIGTERM to all, then wait for each to close cleanly (commit, leave) with a deadline
  local name pid end ok=0
  for name in "$@"; do kill -TERM "$(cat "$WORK/$name.pid")" 2>/dev/null || true; done
  end=$((SECONDS + 15))
  for name in "$@"; do
    pid=$(cat "$WORK/$name.pid")
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      echo "$name did not close within 15s;"
      ok=1
    elif ! wait "$pid" 2>/dev/null; then
      echo "$name exited non-zero: $(tail -n 2 "$WORK/$name.err" | tr '\n' ' ');"
      ok=1
    fi
  done
  return $ok
}

# Waits until the group committed OFFSET on every partition of the group's topic.
kcat_wait_committed() { # offset
  "$PY" "$HERE/kafka_admin.py" wait-committed "$BOOTSTRAP" "$KCAT_GROUP" "$KCAT_GTOPIC" 4 "$1" "$DEADLINE_S"
}

kcat_produce_partitions() { # tag per-partition: values <topic>-<tag>-p<P>-<i>, listed in $WORK/kcat-<tag>
  local p i
  : >"$WORK/kcat-$1"
  for p in 0 1 2 3; do
    for i in $(seq 0 $(($2 - 1))); do echo "$KCAT_GTOPIC-$1-p$p-$i"; done >"$WORK/kcat-$1-p$p"
    kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -X message.timeout.ms=15000 -P -t "$KCAT_GTOPIC" -p "$p" -l "$WORK/kcat-$1-p$p" || return 1
    cat "$WORK/kcat-$1-p$p" >>"$WORK/kcat-$1"
  done
}

kcat_group() {
  local a b end ok=0
  kcat_create_topic "$KCAT_GTOPIC" 4 || { echo "could not create $KCAT_GTOPIC"; return 1; }
  kcat_member ga0
  kcat_member ga1
  end=$((SECONDS + DEADLINE_S))
  while :; do
    a=$(kcat_assignment "$WORK/ga0.err")
    b=$(kcat_assignment "$WORK/ga1.err")
    if [ -n "$a" ] && [ -n "$b" ] && [ "$(echo "$a $b" | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')" = "0 1 2 3 " ]; then break; fi
    if [ "$SECONDS" -ge "$end" ]; then
      echo "no split of partitions 0..3 between the two members within ${DEADLINE_S}s (assignments '$a' and '$b'; $(tail -n 1 "$WORK/ga0.err"))"
      kcat_stop ga0 ga1 >/dev/null || true
      return 1
    fi
    sleep 0.05
  done
  kcat_produce_partitions old 10 || { echo "producing to the group's topic failed;"; kcat_stop ga0 ga1; return 1; }
  end=$((SECONDS + DEADLINE_S))
  until [ "$(lines "$WORK/ga0.out" "$WORK/ga1.out")" -ge 40 ] || [ "$SECONDS" -ge "$end" ]; do sleep 0.05; done
  # Auto commit (every 200 ms) must store every record's offset before the members stop.
  kcat_wait_committed 10 || ok=1
  kcat_stop ga0 ga1 || ok=1
  check group "$WORK" "$a" "$b" "$WORK/kcat-old" || ok=1
  return $ok
}

kcat_group_restart() {
  local end ok=0
  [ -s "$WORK/kcat-old" ] || { echo "not run: the group scenario did not produce"; return 1; }
  kcat_produce_partitions new 5 || { echo "producing to the group's topic failed"; return 1; }
  kcat_member gb0
  kcat_member gb1
  end=$((SECONDS + DEADLINE_S))
  until [ "$(lines "$WORK/gb0.out" "$WORK/gb1.out")" -ge 20 ] || [ "$SECONDS" -ge "$end" ]; do sleep 0.05; done
  kcat_wait_committed 15 || ok=1
  kcat_stop gb0 gb1 || ok=1
  check restart "$WORK" "$WORK/kcat-old" "$WORK/kcat-new" || ok=1
  return $ok
}

# Cross-protocol: Flume's own CLI on the native port, kcat on the Kafka port.
kcat_from_flume() {
  local topic=$KT-x1 p o
  kcat_create_topic "$topic" 4 || { echo "could not create $topic"; return 1; }
  timeout "$DEADLINE_S" "$FLUME" produce --broker "$NATIVE" --topic "$topic" --key from-flume --message "flume says hi" -H origin=flume --format json >"$WORK/flume-ack.json" ||
    { echo "flume-cli produce failed"; return 1; }
  read -r p o < <(check flume-ack <"$WORK/flume-ack.json") || { echo "unreadable flume-cli produce output"; return 1; }
  timeout "$DEADLINE_S" kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -C -t "$topic" -p "$p" -o "$o" -c 1 -e -J -q >"$WORK/x1.json" ||
    { echo "kcat -C failed or timed out"; return 1; }
  check from-flume "$p" "$o" <"$WORK/x1.json"
}

kcat_to_flume() {
  local topic=$KT-x2
  kcat_create_topic "$topic" 4 || { echo "could not create $topic"; return 1; }
  printf 'from-kcat:kcat says hi\n' | kcat -b "$BOOTSTRAP" "${KCAT_X[@]}" -X message.timeout.ms=15000 -P -t "$topic" -p 2 -K: -H origin=kcat ||
    { echo "kcat -P failed"; return 1; }
  timeout "$DEADLINE_S" "$FLUME" consume --broker "$NATIVE" --topic "$topic" --partition 2 --offset 0 --max 1 --format json >"$WORK/x2.json" ||
    { echo "flume-cli consume failed or timed out"; return 1; }
  check to-flume <"$WORK/x2.json"
}

run_kcat() {
  say "running kcat ($(kcat -V 2>&1 | grep -o 'Version [^ ]*' | head -n 1), $(kcat -V 2>&1 | grep -o 'librdkafka [^ ]*' | head -n 1))"
  kcat_scenario metadata kcat_metadata
  kcat_scenario produce kcat_produce
  kcat_scenario consume kcat_consume
  kcat_scenario group kcat_group
  kcat_scenario group-restart kcat_group_restart
  local codec
  for codec in gzip snappy lz4 zstd; do kcat_scenario "compression-$codec" kcat_compression "$codec"; done
  if [ -n "$NATIVE" ]; then
    kcat_scenario flume-to-kcat kcat_from_flume
    kcat_scenario kcat-to-flume kcat_to_flume
  fi
}

# ---------------------------------------------------------------------------
if want kcat; then run_kcat; fi
if want confluent; then run_client confluent 17 "$PY" "$HERE/confluent_test.py" "$BOOTSTRAP" "$PREFIX" "$WORK/logs"; fi
# Two flume-cli group members and a librdkafka one on librdkafka's mock cluster of three
# brokers, from the confluent-kafka wheel (mock_group.py, issue 41): needs flume-cli only.
if want confluent && [ -n "$FLUME" ]; then
  run_client confluent-mock 1 "$PY" "$HERE/mock_group.py" "$FLUME" "$WORK/logs"
fi
if want kafka-python; then run_client kafka-python 11 "$PY" "$HERE/kafka_python_test.py" "$BOOTSTRAP" "$PREFIX" "$WORK/logs"; fi
if want kafkajs; then
  run_client kafkajs 10 env NODE_PATH="$NPM_PREFIX/node_modules" node "$HERE/kafkajs_test.js" "$BOOTSTRAP" "$PREFIX" "$WORK/logs"
fi
# @platformatic/kafka (ESM: PLATFORMATIC_PREFIX, not NODE_PATH): a consumer-protocol group of
# one member and of two, and a classic group: 3 scenarios.
if want platformatic; then
  run_client platformatic 3 env PLATFORMATIC_PREFIX="$PF_PREFIX" node "$HERE/platformatic_test.mjs" "$BOOTSTRAP" "$PREFIX"
fi
# Share groups (issue #44) with confluent-kafka's ShareConsumer: 6 scenarios. With flume-cli it
# starts brokers of its own when the group configs it needs (lock duration, delivery limit,
# share.auto.offset.reset) are not taken through IncrementalAlterConfigs (see share_test.py).
if want share; then
  if [ -n "$FLUME" ]; then
    run_client share 6 "$PY" "$HERE/share_test.py" --flume "$FLUME" --prefix "$PREFIX" --logdir "$WORK/logs/share"
  else
    run_client share 6 "$PY" "$HERE/share_test.py" --bootstrap "$BOOTSTRAP" --prefix "$PREFIX" --logdir "$WORK/logs/share"
  fi
fi
# Consumer-protocol groups (KIP-848) with confluent-kafka's Consumer, group.protocol=consumer:
# 5 scenarios. With flume-cli on a broker of its own with a 6 s session timeout (a killed consumer's
# partitions move after it); against a running broker, after that broker's 45 s default.
if want consumer-protocol; then
  if [ -n "$FLUME" ]; then
    run_client consumer-protocol 5 "$PY" "$HERE/consumer_protocol_test.py" --flume "$FLUME" --prefix "$PREFIX" --logdir "$WORK/logs/consumer-protocol"
  else
    run_client consumer-protocol 5 "$PY" "$HERE/consumer_protocol_test.py" --bootstrap "$BOOTSTRAP" --prefix "$PREFIX" --logdir "$WORK/logs/consumer-protocol"
  fi
fi
# Both libraries side by side (stream_apps.py runs each in a thread): 2 scenarios each.
STREAM_LIBS=()
for lib in quixstreams faust; do if want "$lib"; then STREAM_LIBS+=("$lib"); fi; done
if [ "${#STREAM_LIBS[@]}" -gt 0 ]; then
  libs=$(IFS=,; echo "${STREAM_LIBS[*]}")
  run_client stream-apps $((2 * ${#STREAM_LIBS[@]})) "$SPY" "$HERE/stream_apps.py" "$libs" "$BOOTSTRAP" "$PREFIX" "$WORK/logs"
fi

# Exactly-once under failures (tests/chaos/exactly_once.py): its own broker, killed and
# restarted, an idempotent producer and a transactional pipeline of static members that are
# killed too; seeded (CHAOS_SEED, default 7). Needs a broker of our own: not with FLUME_KAFKA_BOOTSTRAP.
if want confluent && [ -z "${FLUME_KAFKA_BOOTSTRAP:-}" ] && [ -n "${FLUME:-}" ]; then
  run_client exactly-once 1 "$PY" "$ROOT/tests/chaos/exactly_once.py" "$FLUME"
fi
# Share groups under failures (tests/chaos/share_queue.py, issue #44): its own broker, killed
# and restarted, share consumers (processes) killed, killing themselves and stalling past the
# lock; no record lost, none confirmed accepted twice or delivered after a confirmed accept.
# Seeded (CHAOS_SEED, default 7). Needs a broker of our own: not with FLUME_KAFKA_BOOTSTRAP.
if want share && [ -z "${FLUME_KAFKA_BOOTSTRAP:-}" ] && [ -n "${FLUME:-}" ]; then
  run_client share-chaos 1 "$PY" "$ROOT/tests/chaos/share_queue.py" "$FLUME"
fi
# Consumer-protocol groups under failures (tests/chaos/consumer_group.py, issue #43): its own
# broker (6 s session timeout), killed and restarted, consumers (processes, group.protocol=consumer)
# killed from outside, killing themselves between processing and committing, leaving cleanly;
# nothing acknowledged lost, committed offsets never behind a confirmed commit nor past an
# unprocessed record. Seeded (CHAOS_SEED, default 7). Needs a broker of our own.
if want consumer-protocol && [ -z "${FLUME_KAFKA_BOOTSTRAP:-}" ] && [ -n "${FLUME:-}" ]; then
  run_client consumer-protocol-chaos 1 "$PY" "$ROOT/tests/chaos/consumer_group.py" "$FLUME"
fi

# ---------------------------------------------------------------------------
# SASL_SSL (issue #20): a second broker with TLS, --auth required and a user, certificates
# made here with openssl. kcat and confluent-kafka log in with SCRAM-SHA-256 and -512 over
# TLS, confluent-kafka's admin client (the user is an admin) adds a user that then logs in
# and deletes it (Describe/AlterUserScramCredentials), a wrong password fails, openssl s_client verifies the chain and TLS 1.1 is refused.
SECURE_USER=kc-user
SECURE_PW=kc-secret-pw
secure_broker() {
  local t=$WORK/tls end
  mkdir -p "$t" "$WORK/sdata"
  (
    cd "$t"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Flume Clients CA" -keyout ca.key -out ca.pem &&
      openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr &&
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >broker.ext &&
      openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile broker.ext -out broker.pem
  ) >"$WORK/openssl.log" 2>&1 || { echo "openssl could not make the certificates"; return 1; }
  printf '%s\n' "$SECURE_PW" >"$t/pw"
  "$FLUME" users add "$SECURE_USER" --data "$WORK/sdata" --new-password-file "$t/pw" >/dev/null ||
    { echo "flume-cli users add failed"; return 1; }
  SPORT=$(free_port)
  SKPORT=$(free_port)
  while [ "$SKPORT" = "$SPORT" ]; do SKPORT=$(free_port); done
  "$FLUME" broker --host 127.0.0.1 --port "$SPORT" --kafka-port "$SKPORT" --data "$WORK/sdata" \
    --tls-cert "$t/broker.pem" --tls-key "$t/broker.key" --auth required --admin-user "$SECURE_USER" >"$WORK/sbroker.log" 2>&1 &
  SBROKER_PID=$!
  PIDS+=("$SBROKER_PID")
  end=$((SECONDS + 20))
  until port_open 127.0.0.1 "$SKPORT"; do
    kill -0 "$SBROKER_PID" 2>/dev/null || { echo "the TLS broker exited: $(tail -n 2 "$WORK/sbroker.log" | tr '\n' ' ')"; return 1; }
    [ "$SECONDS" -lt "$end" ] || { echo "the TLS broker's Kafka port did not open within 20s"; return 1; }
    sleep 0.05
  done
  SBOOT=localhost:$SKPORT
  STOPIC=$PREFIX-secure
  timeout "$DEADLINE_S" "$FLUME" topics create "$STOPIC" --partitions 1 --broker "localhost:$SPORT" \
    --tls-ca "$t/ca.pem" --user "$SECURE_USER" --password-file "$t/pw" >/dev/null 2>"$WORK/stopic.err" ||
    { echo "could not create $STOPIC: $(tail -n 1 "$WORK/stopic.err")"; return 1; }
}

kcat_sasl() { # mechanism [password]: kcat's options for SASL_SSL
  echo -b "$SBOOT" "${KCAT_X[@]}" -X security.protocol=SASL_SSL -X "ssl.ca.location=$WORK/tls/ca.pem" \
    -X "sasl.mechanisms=$1" -X "sasl.username=$SECURE_USER" -X "sasl.password=${2:-$SECURE_PW}"
}

kcat_secure() { # mechanism: produce three records and read them back over SASL_SSL
  local m=$1 opts
  read -r -a opts <<<"$(kcat_sasl "$m")"
  printf '%s-1\n%s-2\n%s-3\n' "$m" "$m" "$m" >"$WORK/ks-$m.in"
  kcat "${opts[@]}" -X message.timeout.ms=10000 -P -t "$STOPIC" -p 0 -l "$WORK/ks-$m.in" ||
    { echo "kcat -P over SASL_SSL ($m) failed"; return 1; }
  timeout "$DEADLINE_S" kcat "${opts[@]}" -C -t "$STOPIC" -p 0 -o beginning -e -q >"$WORK/ks-$m.out" ||
    { echo "kcat -C over SASL_SSL ($m) failed"; return 1; }
  grep -qxF -f "$WORK/ks-$m.in" "$WORK/ks-$m.out" && [ "$(grep -cxF -f "$WORK/ks-$m.in" "$WORK/ks-$m.out")" -eq 3 ] ||
    { echo "consumed $(lines "$WORK/ks-$m.out") records without the three produced"; return 1; }
}

kcat_secure_wrong() {
  local opts
  read -r -a opts <<<"$(kcat_sasl SCRAM-SHA-256 wrong-pw)"
  if timeout 15 kcat "${opts[@]}" -m 5 -L >"$WORK/ks-wrong.out" 2>&1; then
    echo "kcat -L with a wrong password succeeded"
    return 1
  fi
  grep -qi 'auth' "$WORK/ks-wrong.out" || { echo "no authentication error: $(tail -n 1 "$WORK/ks-wrong.out")"; return 1; }
}

tls_chain() {
  timeout 10 openssl s_client -connect "127.0.0.1:$SKPORT" -servername localhost -verify_hostname localhost \
    -CAfile "$WORK/tls/ca.pem" -verify_return_error </dev/null >"$WORK/s_client.out" 2>&1 ||
    { echo "openssl s_client did not verify the chain: $(grep -m 1 -i 'verify\|error' "$WORK/s_client.out")"; return 1; }
  grep -q 'Verify return code: 0 (ok)' "$WORK/s_client.out" || { echo "no 'Verify return code: 0 (ok)'"; return 1; }
}

tls_old_refused() {
  # SECLEVEL=0: this openssl offers TLS 1.1 (it sends its hello); the broker must answer
  # with an alert, and no cipher is agreed.
  if timeout 10 openssl s_client -connect "127.0.0.1:$SKPORT" -servername localhost -tls1_1 \
    -cipher 'DEFAULT:@SECLEVEL=0' </dev/null >"$WORK/s_client11.out" 2>&1; then
    echo "a TLS 1.1 handshake succeeded"
    return 1
  fi
  grep -q 'Cipher is (NONE)' "$WORK/s_client11.out" && grep -q 'alert' "$WORK/s_client11.out" ||
    { echo "no alert from the broker: $(grep -m 1 -i 'error' "$WORK/s_client11.out")"; return 1; }
}

run_secure() {
  # In this shell, not a subshell: the broker's pid and ports must outlive the call.
  if ! secure_broker >"$WORK/logs/secure-setup.msg" 2>&1; then
    fail "secure setup: $(tr '\n' ' ' <"$WORK/logs/secure-setup.msg" | cut -c1-400)"
    return
  fi
  # Every good login first: the wrong passwords then use up 127.0.0.1's failed logins.
  local args=("$SBOOT" "$WORK/tls/ca.pem" "$SECURE_USER" "$SECURE_PW" "$STOPIC")
  if want kcat; then
    kcat_scenario tls-chain-verified tls_chain
    kcat_scenario tls1.1-refused tls_old_refused
    kcat_scenario sasl-ssl-scram-sha-256 kcat_secure SCRAM-SHA-256
    kcat_scenario sasl-ssl-scram-sha-512 kcat_secure SCRAM-SHA-512
  fi
  if want confluent; then
    run_client confluent-secure 2 "$PY" "$HERE/confluent_secure.py" "${args[@]}" login SCRAM-SHA-256 SCRAM-SHA-512
    # The user is an admin: it adds a user over Kafka's admin API, which then logs in.
    run_client confluent-secure-users 1 "$PY" "$HERE/confluent_secure.py" "${args[@]}" users SCRAM-SHA-256
  fi
  if want kcat; then kcat_scenario sasl-ssl-wrong-password kcat_secure_wrong; fi
  if want confluent; then
    run_client confluent-secure-wrong 1 "$PY" "$HERE/confluent_secure.py" "${args[@]}" wrong SCRAM-SHA-256
  fi
}
if [ -n "$FLUME" ] && { want kcat || want confluent; }; then
  SECURE_T0=$SECONDS
  run_secure
  say "SASL_SSL scenarios took $((SECONDS - SECURE_T0))s"
fi

if [ -n "${BROKER_PID:-}" ] && ! kill -0 "$BROKER_PID" 2>/dev/null; then
  fail "broker: exited during the run (log: $(tail -n 3 "$WORK/broker.log" | tr '\n' ' '))"
fi
if [ -n "${SBROKER_PID:-}" ] && ! kill -0 "$SBROKER_PID" 2>/dev/null; then
  fail "TLS broker: exited during the run (log: $(tail -n 3 "$WORK/sbroker.log" | tr '\n' ' '))"
fi
summary
