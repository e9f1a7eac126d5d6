#!/usr/bin/env bash
# librdkafka's own integration test suite (tests/test-runner of Debian's librdkafka source
# package, 2.0.2 on bookworm) against Flume's Kafka listener. See README.md beside this file.
#
#   tests/librdkafka/run.sh              build (cached), start a broker, run the CI subset
#                                        (the `ci` lines of tests.txt)
#   tests/librdkafka/run.sh --all        every broker test of tests.txt (`ci` and `full` lines;
#                                        the `skip` lines are printed as SKIP with their reason)
#   tests/librdkafka/run.sh 0082 0099    only these test numbers, whatever tests.txt says of them
#   tests/librdkafka/run.sh --build-only build the test-runner into the cache and stop
#   tests/librdkafka/run.sh --lrk 2.15 [...]  the same with librdkafka 2.15.1 (the source the npm
#                                        package @confluentinc/kafka-javascript 1.10.1 ships) and
#                                        its list tests-2.15.txt: its share-consumer tests
#   tests/librdkafka/run.sh --lrk 2.15 --list broker [--protocol classic|consumer] [...]
#                                        librdkafka 2.15.1's other broker tests (tests-2.15-broker.txt),
#                                        their consumers on the classic group protocol (the default)
#                                        or on Kafka 4's consumer protocol (KIP-848,
#                                        TEST_CONSUMER_GROUP_PROTOCOL=consumer: group.protocol=consumer
#                                        on every consumer the runner creates)
#   --list share|broker                  with --lrk 2.15: which list (default share: tests-2.15.txt)
#   --protocol classic|consumer          with --lrk 2.15: the group protocol of the tests' consumers
#                                        (TEST_CONSUMER_GROUP_PROTOCOL of the runner; default: that
#                                        variable if set, else classic). A list's mode may differ
#                                        per protocol: `full/ci` is full under classic, ci under consumer
#
# Environment:
#   FLUME_CLI=path                  the flume-cli binary to run (default: cargo build -p flume-cli
#                                   --locked, then ${CARGO_TARGET_DIR:-target}/debug/flume-cli)
#   FLUME_CACHE=dir                 build cache (default ${TMPDIR:-/tmp}/flume-ci-cache); the build
#                                   goes to $FLUME_CACHE/librdkafka-<version>/
#   LIBRDKAFKA_TEST_TIMEOUT=s       outer timeout of one test-runner run (default 120 for the CI
#                                   subset, whose tests take seconds; 600 otherwise)
#   LIBRDKAFKA_TIMEOUT_MULTIPLIER=n test.timeout.multiplier of the runner (default 3)
#   LIBRDKAFKA_QUICK=1              the runner's quick mode (-Q): fewer messages, and every
#                                   sub-test not marked quick is skipped while the test still
#                                   says PASSED (so it is off by default)
#   LIBRDKAFKA_BATCH=0|1            run the selected tests in one test-runner process (default: 1
#                                   for the CI subset; a test without a pass there runs again alone)
#   LIBRDKAFKA_BATCH_TIMEOUT=s      outer timeout of such a run (default 300; the CI subset takes
#                                   about 80 s, 190 s on a loaded machine); a test that hung there
#                                   is not run again
#   TEST_LEVEL=n                    the runner's verbosity (default 2)
#   KEEP_WORK=1                     keep the logs (one per test-runner run) and the broker's data
#
# Output: one `PASS|FAIL|SKIP NNNN name (seconds)` line per test (a FAIL says why, read from the
# runner's log by runner_result.py), then `N passed, N failed, N skipped`; the exit status is non-zero if any test
# that was run failed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}
LIST=$HERE/tests.txt
TEST_TIMEOUT=${LIBRDKAFKA_TEST_TIMEOUT:-}
MULTIPLIER=${LIBRDKAFKA_TIMEOUT_MULTIPLIER:-3}
QUICK=${LIBRDKAFKA_QUICK:-0}
BATCH=${LIBRDKAFKA_BATCH:-}
BATCH_TIMEOUT=${LIBRDKAFKA_BATCH_TIMEOUT:-300}
# The broker level the runner assumes: it skips tests needing a newer broker (0126: 3.1).
KAFKA_VERSION_CLAIMED=2.8.0

# Debian's source package (bookworm). Another version may be served one day (a point release):
# the build then takes whatever bookworm has and says so. With --lrk 2.15: librdkafka 2.15.1
# from the npm tarball below (pinned by its sha256).
LRK_PKG=librdkafka
LRK_WANT=2.0.2
NPM_TARBALL=https://registry.npmjs.org/@confluentinc/kafka-javascript/-/kafka-javascript-1.10.1.tgz
NPM_SHA256=ada7d703bb1d3237e2292bfabf438d663b6160c9f1ac2a2406b5dc4257c81b66
# No SSL, SASL or HTTP (their tests are skipped); zstd for 0017; -O0 without -g builds in about
# half the time of -O2 (librdkafka's own dev-conf.sh tests -O0 builds too).
CONFIGURE_FLAGS=(--no-download --disable-ssl --disable-gssapi --disable-curl --enable-zstd --disable-lz4-ext
  --disable-optimization --disable-debug-symbols)

MODE=ci
ONLY=()
BROKER_ARGS=()
LIST_KIND=
PROTOCOL=
while [ $# -gt 0 ]; do
  case "$1" in
    --all) MODE=all ;;
    --build-only) MODE=build ;;
    --lrk)
      case "${2:-}" in
        2.0 | 2.0.2) ;;
        2.15 | 2.15.1)
          LRK_WANT=2.15.1
          # Kafka 4.2: the share-consumer tests are TEST_BRKVER(4, 2, 0, 0); the broker tests
          # take their Kafka 4 paths (0081's group configs, 0092 skips MsgVersion 1, ...).
          KAFKA_VERSION_CLAIMED=4.2.0
          # The broker as it starts by default: the share tests set their groups' configs
          # (share.auto.offset.reset, ...) with IncrementalAlterConfigs on a GROUP resource.
          BROKER_ARGS=()
          ;;
        *) echo "error: --lrk takes 2.0 or 2.15, not '${2:-}'" >&2; exit 2 ;;
      esac
      shift
      ;;
    --list)
      case "${2:-}" in
        share | broker) LIST_KIND=$2 ;;
        *) echo "error: --list takes share or broker, not '${2:-}'" >&2; exit 2 ;;
      esac
      shift
      ;;
    --protocol)
      case "${2:-}" in
        classic | consumer) PROTOCOL=$2 ;;
        *) echo "error: --protocol takes classic or consumer, not '${2:-}'" >&2; exit 2 ;;
      esac
      shift
      ;;
    -h | --help) awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0"; exit 0 ;;
    [0-9][0-9][0-9][0-9]) MODE=only; ONLY+=("$1") ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Which list, and the consumers' group protocol (librdkafka 2.15.1's test.c reads
# TEST_CONSUMER_GROUP_PROTOCOL and sets group.protocol on every consumer it creates; 2.0.2 has
# no consumer protocol).
if [ "$LRK_WANT" = 2.15.1 ]; then
  case "${LIST_KIND:-share}" in
    share) LIST=$HERE/tests-2.15.txt ;;
    broker) LIST=$HERE/tests-2.15-broker.txt ;;
  esac
  if [ -z "$PROTOCOL" ]; then
    case "${TEST_CONSUMER_GROUP_PROTOCOL:-classic}" in
      classic | consumer) PROTOCOL=${TEST_CONSUMER_GROUP_PROTOCOL:-classic} ;;
      *) echo "error: TEST_CONSUMER_GROUP_PROTOCOL must be classic or consumer, not '$TEST_CONSUMER_GROUP_PROTOCOL'" >&2; exit 2 ;;
    esac
  fi
else
  [ -z "$LIST_KIND" ] || { echo "error: --list goes with --lrk 2.15 (2.0.2 has one list, tests.txt)" >&2; exit 2; }
  [ "${PROTOCOL:-${TEST_CONSUMER_GROUP_PROTOCOL:-classic}}" = classic ] ||
    { echo "error: --protocol consumer (TEST_CONSUMER_GROUP_PROTOCOL) goes with --lrk 2.15: librdkafka 2.0.2 has no consumer group protocol" >&2; exit 2; }
  PROTOCOL=classic
fi

# Batching: the CI subset by default (see run_batched).
if [ -z "$BATCH" ]; then
  if [ "$MODE" = ci ]; then BATCH=1; else BATCH=0; fi
fi
if [ -z "$TEST_TIMEOUT" ]; then
  if [ "$MODE" = ci ]; then TEST_TIMEOUT=120; else TEST_TIMEOUT=600; fi
fi

PASSED=0
FAILED=0
SKIPPED=0
say() { echo "[librdkafka] $*" >&2; }
summary() {
  echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
  [ "$FAILED" -eq 0 ]
}
die() {
  echo "FAIL setup: $*"
  FAILED=$((FAILED + 1))
  summary || exit 1
}

# ---------------------------------------------------------------------------
# Processes and temp dirs: every one is cleaned on exit.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flume-librdkafka.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  [ -z "${BUILD_TMP:-}" ] || rm -rf "$BUILD_TMP"
  if [ -n "${KEEP_WORK:-}" ]; then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------
# Build (cached): Debian's librdkafka source, its libraries and tests/test-runner.
# Packages the build needs: dpkg-source (dpkg-dev), a C/C++ toolchain, zlib, zstd and RapidJSON
# headers (BUILD_DEPS names them in the cache stamp: a change rebuilds).
BUILD_DEPS="zlib zstd rapidjson"
install_build_deps() {
  local missing=()
  if [ "$LRK_WANT" = 2.15.1 ]; then
    command -v curl >/dev/null || missing+=(curl ca-certificates)
  else
    command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
  fi
  command -v gcc >/dev/null || missing+=(gcc)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  command -v xz >/dev/null || missing+=(xz-utils)
  [ -e /usr/include/zlib.h ] || missing+=(zlib1g-dev)
  [ -e /usr/include/zstd.h ] || missing+=(libzstd-dev)
  # RapidJSON: the tests that check statistics JSON (0053, 0101, 0110) and 0098 need it.
  [ -e /usr/include/rapidjson/schema.h ] || missing+=(rapidjson-dev)
  [ ${#missing[@]} -gt 0 ] || return 0
  say "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >"$WORK/apt.log" 2>&1 &&
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1 || {
    tail -n 20 "$WORK/apt.log" >&2
    return 1
  }
}

# apt-get source with deb-src lines of its own: a sources list, package lists and cache under
# $CACHE/apt-src, so the machine's apt (Types: deb only) is not touched.
fetch_source() { # dest-dir: downloads and unpacks the source package there
  local dest=$1 apt=$CACHE/apt-src line uri suites comps keyring
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dest"
  : >"$apt/sources.list"
  # Same URIs and suites as the machine's deb lines (deb822 or one-line format).
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    awk '
      /^[[:space:]]*$/ { if (t ~ /deb/) print u "|" s "|" c "|" k; t = u = s = c = k = ""; next }
      /^Types:/ { t = $0 } /^URIs:/ { $1 = ""; u = $0 } /^Suites:/ { $1 = ""; s = $0 }
      /^Components:/ { $1 = ""; c = $0 } /^Signed-By:/ { $1 = ""; k = $0 }
      END { if (t ~ /deb/) print u "|" s "|" c "|" k }' /etc/apt/sources.list.d/*.sources |
      while IFS='|' read -r uri suites comps keyring; do
        for uri in $uri; do
          for s in $suites; do
            echo "deb-src ${keyring:+[signed-by=${keyring# }] }$uri $s$comps" >>"$apt/sources.list"
          done
        done
      done
  fi
  if [ -f /etc/apt/sources.list ]; then
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list >>"$apt/sources.list"
  fi
  [ -s "$apt/sources.list" ] || { say "no deb lines in /etc/apt/sources.list{,.d} to derive deb-src lines from"; return 1; }
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >"$WORK/apt-src.log" 2>&1 || { tail -n 20 "$WORK/apt-src.log" >&2; return 1; }
  (cd "$dest" && apt-get "${opts[@]}" source -qq --download-only "$LRK_PKG") >>"$WORK/apt-src.log" 2>&1 ||
    { tail -n 20 "$WORK/apt-src.log" >&2; return 1; }
  local dsc
  dsc=$(ls "$dest"/"$LRK_PKG"_*.dsc | head -n 1)
  (cd "$dest" && dpkg-source --no-check -x "$(basename "$dsc")" src) >>"$WORK/apt-src.log" 2>&1 ||
    { tail -n 20 "$WORK/apt-src.log" >&2; return 1; }
}

# librdkafka 2.15.1: deps/librdkafka of the npm package (src/, src-cpp/ and tests/ as in
# librdkafka's repository), unpacked as dest-dir/src.
fetch_npm_source() { # dest-dir
  local dest=$1 tgz=$1/kafka-javascript.tgz
  curl -sSfL --retry 3 -o "$tgz" "$NPM_TARBALL" 2>"$WORK/npm-src.log" || { cat "$WORK/npm-src.log" >&2; return 1; }
  echo "$NPM_SHA256  $tgz" | sha256sum -c --quiet - >&2 || { say "$NPM_TARBALL: sha256 mismatch"; return 1; }
  tar -xzf "$tgz" -C "$dest" package/deps/librdkafka || return 1
  mv "$dest/package/deps/librdkafka" "$dest/src"
  rm -rf "$dest/package" "$tgz"
  [ -f "$dest/src/tests/0170-share_consumer_subscription.c" ] || { say "no tests/ in $NPM_TARBALL's deps/librdkafka"; return 1; }
  grep -q 'define RD_KAFKA_VERSION *0x020f01ff' "$dest/src/src/rdkafka.h" ||
    { say "$NPM_TARBALL's librdkafka is not 2.15.1"; return 1; }
}

LRK_DIR=
RUNNER=
stamp_for() {
  local from=
  [ "$LRK_WANT" != 2.15.1 ] || from=" from ${NPM_TARBALL##*/}"
  echo "$LRK_PKG-$1$from ($BUILD_DEPS) configure ${CONFIGURE_FLAGS[*]}; make libs; make -C tests build"
}
BUILD_TMP=
build_runner() {
  local t0 dir= d want_stamp tmp ver
  mkdir -p "$CACHE"
  exec 9>"$CACHE/$LRK_PKG.lock"
  flock 9 # two runs sharing a cache build it once
  # A build of the wanted version first, else of the version bookworm served instead.
  for d in "$CACHE/$LRK_PKG-$LRK_WANT" "$CACHE/$LRK_PKG"-[0-9]*; do
    [ -x "$d/src/tests/test-runner" ] || continue
    [ "$(cat "$d/.flume-built" 2>/dev/null)" = "$(stamp_for "${d##*/$LRK_PKG-}")" ] || continue
    dir=$d
    break
  done
  if [ -n "$dir" ]; then
    say "test-runner: cached in $dir"
  else
    dir=$CACHE/$LRK_PKG-$LRK_WANT
    want_stamp=$(stamp_for "$LRK_WANT")
    t0=$(date +%s.%N)
    install_build_deps || { flock -u 9; return 1; }
    tmp=$(mktemp -d "$CACHE/$LRK_PKG-build.XXXXXX")
    BUILD_TMP=$tmp # removed by cleanup if the build is interrupted
    if [ "$LRK_WANT" = 2.15.1 ]; then
      say "fetching $LRK_PKG $LRK_WANT's source ($NPM_TARBALL, deps/librdkafka)"
      fetch_npm_source "$tmp" || { rm -rf "$tmp"; flock -u 9; return 1; }
      ver=$LRK_WANT
    else
      say "fetching Debian's $LRK_PKG source (apt-get source, deb-src lists of its own in $CACHE/apt-src)"
      fetch_source "$tmp" || { rm -rf "$tmp"; flock -u 9; return 1; }
      ver=$(sed -n 's/^Version: \([^-]*\).*/\1/p' "$tmp"/"$LRK_PKG"_*.dsc | head -n 1)
    fi
    say "fetched the source in $(elapsed "$t0")s"
    if [ "$ver" != "$LRK_WANT" ]; then
      say "note: bookworm serves $LRK_PKG $ver, not $LRK_WANT (tests.txt was written for $LRK_WANT)"
      dir=$CACHE/$LRK_PKG-$ver
      want_stamp=$(stamp_for "$ver")
    fi
    say "building $LRK_PKG $ver: configure, make -j2 libs, make -j2 -C tests build (log: $WORK/build.log)"
    if ! (cd "$tmp/src" && ./configure "${CONFIGURE_FLAGS[@]}" && make -j2 libs && make -j2 -C tests build) >"$WORK/build.log" 2>&1; then
      tail -n 30 "$WORK/build.log" >&2
      rm -rf "$tmp"
      flock -u 9
      return 1
    fi
    rm -rf "$dir"
    mv "$tmp" "$dir"
    BUILD_TMP=
    echo "$want_stamp" >"$dir/.flume-built"
    say "built $LRK_PKG $ver in $(elapsed "$t0")s (cached in $dir)"
  fi
  flock -u 9
  LRK_DIR=$dir/src
  RUNNER=$LRK_DIR/tests/test-runner
}

BUILD_T0=$(date +%s.%N)
build_runner || die "could not build librdkafka's test-runner"
say "build step: $(elapsed "$BUILD_T0")s"
[ "$MODE" != build ] || exit 0

# ---------------------------------------------------------------------------
# The list: which tests run in which mode, with the test-runner's extra arguments.
#   NAME  ci|full|skip  [runner args]  # why
# A mode CLASSIC/CONSUMER (e.g. full/ci) is one per group protocol: this run's is taken.
declare -A L_MODE L_ARGS L_WHY
L_NAMES=()
while IFS= read -r line; do
  why=
  if [[ "$line" == *"#"* ]]; then why=${line#*#}; why=${why# }; line=${line%%#*}; fi
  read -r -a f <<<"$line"
  [ ${#f[@]} -gt 0 ] || continue
  name=${f[0]}
  [[ "$name" =~ ^[0-9]{4}_ ]] || { echo "error: $LIST: bad test name '$name'" >&2; exit 2; }
  mode=${f[1]:-}
  if [[ "$mode" == */* ]]; then
    if [ "$PROTOCOL" = consumer ]; then mode=${mode#*/}; else mode=${mode%%/*}; fi
  fi
  case "$mode" in ci | full | skip) ;; *) echo "error: $LIST: $name: mode must be ci, full or skip, or CLASSIC/CONSUMER of these ('${f[1]:-}')" >&2; exit 2 ;; esac
  L_NAMES+=("$name")
  L_MODE[$name]=$mode
  L_ARGS[$name]=${f[*]:2}
  L_WHY[$name]=$why
done <"$LIST"

selected() { # name: should this run execute it?
  case "$MODE" in
    ci) [ "${L_MODE[$1]}" = ci ] ;;
    all) [ "${L_MODE[$1]}" != skip ] ;;
    only) [[ " ${ONLY[*]} " == *" ${1%%_*} "* ]] ;;
  esac
}
listed() { # name: is it part of this run's table at all?
  case "$MODE" in
    ci) [ "${L_MODE[$1]}" = ci ] ;;
    all) true ;;
    only) [[ " ${ONLY[*]} " == *" ${1%%_*} "* ]] ;;
  esac
}
if [ "$MODE" = only ]; then
  for n in "${ONLY[@]}"; do
    found=0
    for name in "${L_NAMES[@]}"; do [ "${name%%_*}" != "$n" ] || found=1; done
    [ "$found" -eq 1 ] || { echo "error: test $n is not in $LIST (local-only tests are not listed)" >&2; exit 2; }
  done
fi

# One test-runner run per test number and argument set (the runner selects by number: the
# entries of one number, e.g. 0045_*, run together); the groups in list order.
GROUPS_ORDER=()
declare -A G_NAMES
for name in "${L_NAMES[@]}"; do
  listed "$name" || continue
  key="${name%%_*}|${L_ARGS[$name]}"
  [ -n "${G_NAMES[$key]+x}" ] || GROUPS_ORDER+=("$key")
  G_NAMES[$key]="${G_NAMES[$key]:-} $name"
done

# ---------------------------------------------------------------------------
# The broker(s): flume-cli with its Kafka listener on a free port, in a temp dir. A second one
# with --no-auto-create serves the runner's `noautocreate` scenario (-s noautocreate).
FLUME=${FLUME_CLI:-}
if [ -z "$FLUME" ]; then
  say "building flume-cli (cargo build -p flume-cli --locked)"
  if ! (cd "$ROOT" && cargo build -p flume-cli --locked) >"$WORK/cargo.log" 2>&1; then
    tail -n 30 "$WORK/cargo.log" >&2
    die "cargo build -p flume-cli --locked failed"
  fi
  FLUME=${CARGO_TARGET_DIR:-$ROOT/target}/debug/flume-cli
  [[ "$FLUME" = /* ]] || FLUME=$ROOT/$FLUME
fi
[ -x "$FLUME" ] || die "no flume-cli binary at $FLUME"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

declare -A B_PID B_PORT B_CONF B_LOG
BROKER_STARTS=0
start_broker() { # broker key (scenario_of): starts (or restarts) that broker and writes its test.conf
  local key=$1 sc=${1%% *} extra=() kport pid end n own=()
  # As librdkafka's scenarios (tests/scenarios/*.json): 4 partitions per auto-created topic
  # (0029, 0054 and others produce to partition 3 of one); noautocreate: no auto-creation.
  extra=(--partitions 4 "${BROKER_ARGS[@]}")
  [ "$sc" = noautocreate ] && extra+=(--no-auto-create)
  # The list's broker:ARG arguments of these tests.
  [ "$key" = "$sc" ] || read -r -a own <<<"${key#* }"
  extra+=("${own[@]}")
  BROKER_STARTS=$((BROKER_STARTS + 1))
  n=$BROKER_STARTS
  kport=$(free_port)
  mkdir -p "$WORK/data-$n"
  "$FLUME" broker --host 127.0.0.1 --port 0 --kafka-port "$kport" --data "$WORK/data-$n" "${extra[@]}" \
    >"$WORK/broker-$n.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  end=$((SECONDS + 20))
  until port_open 127.0.0.1 "$kport"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$WORK/broker-$n.log" >&2
      say "the broker exited before its Kafka port $kport accepted connections"
      return 1
    fi
    [ "$SECONDS" -lt "$end" ] || { say "the broker's Kafka port $kport did not accept connections within 20s"; return 1; }
    sleep 0.05
  done
  B_PID[$key]=$pid
  B_PORT[$key]=$kport
  B_CONF[$key]=$WORK/test-$n.conf
  B_LOG[$key]=$WORK/broker-$n.log
  cat >"${B_CONF[$key]}" <<EOF
# Written by tests/librdkafka/run.sh for the $sc scenario
bootstrap.servers=127.0.0.1:$kport
test.timeout.multiplier=$MULTIPLIER
EOF
  say "broker ($sc scenario${extra[*]:+, ${extra[*]}}): kafka 127.0.0.1:$kport, log $WORK/broker-$n.log"
}

# Stand-ins for Kafka's Java tools: the runner lets some tests run only when KAFKA_PATH (and
# ZK_ADDRESS) are set, though they create their topics with the Admin API (0011, 0028, 0044,
# 0045, 0048). A test that really calls a tool fails with this message (tests.txt skips those).
KAFKA_STUB=$WORK/kafka-tools-stub
mkdir -p "$KAFKA_STUB/bin"
for tool in kafka-topics.sh kafka-acls.sh kafka-configs.sh kafka-run-class.sh; do
  printf '#!/bin/sh\necho "%s: Kafka'"'"'s Java tools are not part of the librdkafka harness (stub): $*" >&2\nexit 1\n' "$tool" \
    >"$KAFKA_STUB/bin/$tool"
  chmod +x "$KAFKA_STUB/bin/$tool"
done

# ---------------------------------------------------------------------------
# Running the test-runner and reporting what its log says.
strip_colors() { sed -e 's/\x1b\[[0-9;]*m//g' -e 's/\x1b(B//g'; }

report() { # state NNNN_name seconds [detail]
  local st=$1 name=$2 secs=$3 detail=${4:-}
  local line="$st ${name%%_*} ${name#*_} (${secs}s)"
  [ -z "$detail" ] || line="$line: $detail"
  echo "$line"
  case "$st" in PASS) PASSED=$((PASSED + 1)) ;; FAIL) FAILED=$((FAILED + 1)) ;; SKIP) SKIPPED=$((SKIPPED + 1)) ;; esac
}

# Runs the test-runner once: label, scenario, test numbers (space separated), runner args...
# Sets R_LOG, R_CODE, R_TOOK.
run_runner() {
  local label=$1 sc=$2 nums=$3 t0 a
  shift 3
  local args=()
  for a in "$@"; do [[ "$a" == broker:* ]] || args+=("$a"); done
  args+=(-p1 -L)
  [ "$QUICK" = 1 ] && args+=(-Q)
  R_LOG=$WORK/logs/$label.log
  R_CODE=0
  t0=$(date +%s.%N)
  # CI=true would make the runner add 2 to the timeout multiplier: the same settings everywhere.
  local proto=(-u TEST_CONSUMER_GROUP_PROTOCOL)
  [ "$LRK_WANT" != 2.15.1 ] || proto=(TEST_CONSUMER_GROUP_PROTOCOL="$PROTOCOL")
  (cd "$WORK/run" && env -u CI "${proto[@]}" TESTS="$nums" TEST_KAFKA_VERSION="$KAFKA_VERSION_CLAIMED" \
    RDKAFKA_TEST_CONF="${B_CONF[$sc]}" TEST_LEVEL="${TEST_LEVEL:-2}" \
    KAFKA_PATH="$KAFKA_STUB" ZK_ADDRESS=127.0.0.1:1 \
    LD_LIBRARY_PATH="$LRK_DIR/src:$LRK_DIR/src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout -k 10 "${RUNNER_TIMEOUT:-$TEST_TIMEOUT}" "$RUNNER" "${args[@]}") >"$R_LOG" 2>&1 || R_CODE=$?
  R_TOOK=$(elapsed "$t0")
}

ensure_broker() { # scenario
  if [ -z "${B_PID[$1]:-}" ] || ! kill -0 "${B_PID[$1]}" 2>/dev/null; then
    start_broker "$1"
  fi
}

check_broker() { # scenario what-ran
  if ! kill -0 "${B_PID[$1]}" 2>/dev/null; then
    echo "FAIL broker: exited during $2 (log: $(tail -n 3 "${B_LOG[$1]}" | tr '\n' ' ' | cut -c1-300)); restarting it for the next tests"
    FAILED=$((FAILED + 1))
    B_PID[$1]=
  fi
}

scenario_of() { # list args...: the broker's key: the -s argument (else default), then the
  local sc=default b=() # broker:ARG arguments' ARGs (flags of flume-cli broker)
  while [ $# -gt 0 ]; do
    if [ "$1" = -s ] && [ $# -gt 1 ]; then sc=$2; fi
    [[ "$1" != broker:* ]] || b+=("${1#broker:}")
    shift
  done
  echo "$sc${b[*]:+ ${b[*]}}"
}

last_line() { strip_colors <"$1" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-200; }

# Reports the entries of one group from a runner log (results: runner_result.py's lines).
report_group() { # key results code took log [note-if-pass]
  local key=$1 results=$2 code=$3 took=$4 log=$5 note=${6:-} num=${1%%|*} names name
  local state secs detail any_fail=0 main_why=
  read -r -a names <<<"${G_NAMES[$key]}"
  while IFS='|' read -r name state secs detail; do
    case "$state" in
      OTHER) say "note: $name ($detail) ran with $num but is not in ${LIST##*/}" ;;
      FAILED) [ "$name" != "<MAIN>" ] || main_why=$detail ;;
    esac
  done <<<"$results"
  for name in "${names[@]}"; do
    state= secs= detail=
    IFS='|' read -r _ state secs detail < <(grep "^$name|" <<<"$results" | head -n 1) || true
    if ! selected "$name"; then
      report SKIP "$name" 0 "${L_WHY[$name]:-excluded in ${LIST##*/}} (ran with its number; result ignored)"
      continue
    fi
    case "${state:-}" in
      PASSED) report PASS "$name" "$secs" "$note" ;;
      SKIPPED) report SKIP "$name" "$secs" "runner: ${detail:-skipped}" ;;
      FAILED) report FAIL "$name" "$secs" "${detail:-failed}"; any_fail=1 ;;
      *)
        any_fail=1
        if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
          report FAIL "$name" "$took" "timed out after ${REPORT_TIMEOUT:-${TEST_TIMEOUT}s (LIBRDKAFKA_TEST_TIMEOUT)}; last line: $(last_line "$log")"
        else
          report FAIL "$name" "$took" "no result from the runner (exit code $code${detail:+, $detail}); last line: $(last_line "$log")"
        fi
        ;;
    esac
  done
  # <MAIN> fails after a test failure (librdkafka threads left running): only said then.
  if [ "$any_fail" -eq 0 ] && [ -n "$main_why" ]; then
    report FAIL "${num}_<MAIN>" "$took" "after the tests passed: $main_why"
    any_fail=1
  elif [ "$code" -ne 0 ] && [ "$any_fail" -eq 0 ]; then
    report FAIL "${num}_<MAIN>" "$took" "test-runner exit code $code with no failed test (see its log)"
    any_fail=1
  fi
  if [ "$any_fail" -eq 1 ]; then
    say "$num: the runner's log is $log${KEEP_WORK:+ (kept)}; its failure lines:"
    strip_colors <"$log" | grep -A1 '^### Test' | grep -v '^--$' | cut -c1-300 | head -n 6 >&2 || true
  fi
}

group_label() { # key: a file name for its log
  local args=${1#*|}
  echo "${1%%|*}${args:+-$(echo "$args" | tr -c 'a-zA-Z0-9\n' '_')}"
}

run_group() { # key [note-if-pass]: one runner run for one group, reported
  local key=$1 note=${2:-} num=${1%%|*} args names name run=0 sc
  read -r -a args <<<"${key#*|}"
  read -r -a names <<<"${G_NAMES[$key]}"
  for name in "${names[@]}"; do selected "$name" && run=1; done
  if [ "$run" -eq 0 ]; then
    for name in "${names[@]}"; do report SKIP "$name" 0 "${L_WHY[$name]:-excluded in ${LIST##*/}}"; done
    return
  fi
  sc=$(scenario_of "${args[@]}")
  ensure_broker "$sc" || { for name in "${names[@]}"; do report FAIL "$name" 0 "no broker for the $sc scenario"; done; return; }
  run_runner "$(group_label "$key")" "$sc" "$num" "${args[@]}"
  report_group "$key" "$(python3 "$HERE/runner_result.py" "$R_LOG" "${names[@]}")" "$R_CODE" "$R_TOOK" "$R_LOG" "$note"
  check_broker "$sc" "$num"
}

# The CI subset in one runner run per argument set (each run of its own costs the runner's
# start and its 1 s wait loop): a group whose tests all report a result is reported from it;
# any other (a failure, an abort, a hang) runs again alone, and that run is reported.
run_batched() {
  local -A by_args
  local order=() key args sc nums names name all results ok bname
  for key in "${GROUPS_ORDER[@]}"; do
    args=${key#*|}
    [ -n "${by_args[a:$args]+x}" ] || order+=("$args")
    by_args[a:$args]="${by_args[a:$args]:-} $key"
  done
  for args in "${order[@]}"; do
    read -r -a keys <<<"${by_args[a:$args]}"
    nums=
    all=()
    for key in "${keys[@]}"; do
      nums="$nums ${key%%|*}"
      read -r -a names <<<"${G_NAMES[$key]}"
      all+=("${names[@]}")
    done
    read -r -a argv <<<"$args"
    sc=$(scenario_of "${argv[@]}")
    if ! ensure_broker "$sc"; then
      for name in "${all[@]}"; do report FAIL "$name" 0 "no broker for the $sc scenario"; done
      continue
    fi
    bname="batch${args:+-$(echo "$args" | tr -c 'a-zA-Z0-9\n' '_')}"
    RUNNER_TIMEOUT=$BATCH_TIMEOUT run_runner "$bname" "$sc" "${nums# }" "${argv[@]}"
    say "one runner run for${nums}: ${R_TOOK}s (exit code $R_CODE)"
    results=$(python3 "$HERE/runner_result.py" "$R_LOG" "${all[@]}")
    check_broker "$sc" "the batch run"
    local batch_main_alone=0
    if grep -q '^<MAIN>|FAILED|' <<<"$results" && ! grep -qE '^[0-9]{4}_[^|]*\|(FAILED|NONE)\|' <<<"$results"; then
      batch_main_alone=1
    elif [ "$R_CODE" -ne 0 ] && ! grep -qE '^[0-9]{4}_[^|]*\|(FAILED|NONE)\|' <<<"$results"; then
      batch_main_alone=1
    fi
    for key in "${keys[@]}"; do
      read -r -a names <<<"${G_NAMES[$key]}"
      ok=1
      for name in "${names[@]}"; do
        grep -qE "^$name\|(PASSED|SKIPPED)\|" <<<"$results" || ok=0
      done
      # <MAIN> fails when librdkafka threads are left running at the end: after a failed
      # test that is why; with none, it cannot be told whose: every group runs again alone.
      [ "$batch_main_alone" -eq 0 ] || ok=0
      local mine
      mine=$(grep -E "^($(IFS='|'; echo "${names[*]}"))\|" <<<"$results") || true
      if [ "$ok" -eq 1 ]; then
        report_group "$key" "$mine" 0 "$R_TOOK" "$R_LOG"
      elif grep -qiE '\|FAILED\|.*timed out|\|NONE\|.*started' <<<"$mine"; then
        # It hung (the runner's own timeout, or the batch's): running it again would cost
        # as much again. Reported from the batch run.
        REPORT_TIMEOUT="${BATCH_TIMEOUT}s (LIBRDKAFKA_BATCH_TIMEOUT, the batch run)" \
          report_group "$key" "$mine" "$R_CODE" "$R_TOOK" "$R_LOG"
      else
        local why
        why=$(grep -E "^($(IFS='|'; echo "${names[*]}"))\|" <<<"$results" | grep -v '|PASSED|' | head -n 1 | cut -d'|' -f2,4 | cut -c1-200) || true
        [ -n "$why" ] || why="the run's <MAIN> check failed or its exit code was $R_CODE"
        if [[ "$why" == FAILED* ]]; then
          say "${key%%|*}: failed in the batch run (${why#FAILED|}); running it alone"
          run_group "$key" "flaky: failed in the batch run: ${why#FAILED|}"
        else
          say "${key%%|*}: no result in the batch run ($why); running it alone"
          run_group "$key"
        fi
      fi
    done
  done
}

# The runner runs in $WORK/run (its stats and offset files go there); some tests open
# ../src/statistics_schema.json, so ../src is librdkafka's src.
mkdir -p "$WORK/logs" "$WORK/run"
ln -s "$LRK_DIR/src" "$WORK/src"
say "runner: $RUNNER (list ${LIST##*/}, group protocol $PROTOCOL, TEST_KAFKA_VERSION=$KAFKA_VERSION_CLAIMED, test.timeout.multiplier=$MULTIPLIER, quick=$QUICK, outer timeout ${TEST_TIMEOUT}s)"
RUN_T0=$(date +%s.%N)
if [ "$BATCH" = 1 ]; then
  say "mode: $MODE; ${#GROUPS_ORDER[@]} test numbers in one runner run per argument set"
  run_batched
else
  say "mode: $MODE; ${#GROUPS_ORDER[@]} test numbers (and argument sets), one test-runner run each"
  for key in "${GROUPS_ORDER[@]}"; do
    run_group "$key"
  done
fi
say "tests took $(elapsed "$RUN_T0")s; $(elapsed "$BUILD_T0")s in all (build step included)"
summary
