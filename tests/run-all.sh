#!/usr/bin/env bash
# The project's one test command: the Rust workspace's tests, the systemd unit
# checked by systemd-analyze (tests/deploy/run.sh), the book in docs/ built by
# mdBook with every local link checked and its charts matching their data
# (tests/docs/run.sh), the observability
# check with real components (promtool, a Prometheus server, headless Chromium:
# tests/observability/run.sh), real Kafka clients against the Kafka listener
# (kcat, confluent-kafka, kafka-python, kafkajs: tests/kafka-clients/run.sh; a
# failing scenario fails the run; FLUME_SKIP_KAFKA_CLIENTS=1 skips it), a subset
# of librdkafka's own integration tests (tests/librdkafka/run.sh, built from
# Debian's source package, then librdkafka 2.15.1's share-consumer tests from the
# npm package's source: run.sh --lrk 2.15, and a subset of its broker tests with the
# consumer group protocol: run.sh --lrk 2.15 --list broker --protocol consumer;
# FLUME_SKIP_LIBRDKAFKA=1 skips them), the SDK's Kafka client against
# librdkafka's mock cluster and kcat (tests/kafka-mock/run.sh; FLUME_SKIP_KAFKA_MOCK=1 skips
# it), then the Python
# package (python/) built into a cached virtual environment and its pytest suite.
#
# Cache: ${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache} keeps the venv and the
# extension's cargo target directory between runs, so a re-run rebuilds only
# what changed. Needs python3 (3.9+) with venv, a Rust toolchain, and PyPI
# (pip fetches maturin and pytest on the first run).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${FLUME_SKIP_KAFKA_MOCK:-}" != 1 ]; then
    # librdkafka's mock cluster program, for e2e_kafka_mock inside the cargo
    # test run below (a separate `cargo test --test e2e` would compile the
    # broker again with another feature set: minutes on the CI machine).
    echo "== tests/kafka-mock/run.sh --prepare (librdkafka-dev with apt, the mock program into the cache)"
    FLUME_KAFKA_MOCK=$(bash tests/kafka-mock/run.sh --prepare)
    export FLUME_KAFKA_MOCK
fi

echo "== cargo test --workspace --locked"
cargo test --workspace --locked

echo "== tests/deploy/run.sh (systemd-analyze verify deploy/flume.service)"
bash tests/deploy/run.sh

echo "== tests/docs/run.sh (the book in docs/ builds, no broken link, charts match benches/results/)"
dstart=$(date +%s)
# Builds mdbook into the cache on the first run.
bash tests/docs/run.sh
echo "docs took $(( $(date +%s) - dstart )) s"

echo "== tests/observability/run.sh"
bash tests/observability/run.sh

if [ "${FLUME_SKIP_KAFKA_CLIENTS:-}" = 1 ]; then
    echo "== tests/kafka-clients/run.sh: SKIPPED (FLUME_SKIP_KAFKA_CLIENTS=1)"
else
    echo "== tests/kafka-clients/run.sh (real Kafka clients; FLUME_SKIP_KAFKA_CLIENTS=1 skips)"
    kstart=$(date +%s)
    # Installs kcat, the Python clients and kafkajs into the cache on the first run.
    bash tests/kafka-clients/run.sh
    echo "kafka clients took $(( $(date +%s) - kstart )) s"
fi

if [ "${FLUME_SKIP_KAFKA_MOCK:-}" = 1 ]; then
    echo "== tests/kafka-mock/run.sh: SKIPPED (FLUME_SKIP_KAFKA_MOCK=1)"
else
    echo "== tests/kafka-mock/run.sh (kcat and the SDK's Kafka client both ways; the mock cluster ran in cargo test; FLUME_SKIP_KAFKA_MOCK=1 skips)"
    mstart=$(date +%s)
    bash tests/kafka-mock/run.sh --interop
    echo "kafka interop took $(( $(date +%s) - mstart )) s"
fi

if [ "${FLUME_SKIP_LIBRDKAFKA:-}" = 1 ]; then
    echo "== tests/librdkafka/run.sh: SKIPPED (FLUME_SKIP_LIBRDKAFKA=1)"
else
    echo "== tests/librdkafka/run.sh (librdkafka's own test suite, the CI subset; FLUME_SKIP_LIBRDKAFKA=1 skips)"
    lstart=$(date +%s)
    # Builds librdkafka's test runner from Debian's source package into the cache on the first run.
    bash tests/librdkafka/run.sh
    # librdkafka 2.15.1's share-consumer tests (its source from the npm package
    # @confluentinc/kafka-javascript 1.10.1, built into the cache on the first run).
    bash tests/librdkafka/run.sh --lrk 2.15
    # librdkafka 2.15.1's broker tests with group.protocol=consumer (KIP-848): the `ci` half of
    # the `full/ci` lines of tests-2.15-broker.txt (about 45 s).
    bash tests/librdkafka/run.sh --lrk 2.15 --list broker --protocol consumer
    echo "librdkafka's tests took $(( $(date +%s) - lstart )) s"
fi

cache="${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}"
venv="$cache/python-venv"
export CARGO_TARGET_DIR="$cache/target"
python="${PYTHON:-python3}"
start=$(date +%s)

echo "== python/: cargo fmt and clippy (the extension is outside the workspace)"
# python/Cargo.lock pins the extension's dependencies, including those of the
# workspace crates it builds on. When one of those gains a dependency, the lock
# falls behind: resolve just what is missing (everything pinned stays pinned)
# and say so, rather than fail every run until someone refreshes it.
if ! cargo metadata --manifest-path python/Cargo.toml --locked --format-version 1 >/dev/null 2>&1; then
    echo "warning: python/Cargo.lock is behind the workspace crates' dependencies; resolving the missing ones (commit the updated python/Cargo.lock)" >&2
    cargo metadata --manifest-path python/Cargo.toml --format-version 1 >/dev/null
fi
cargo fmt --manifest-path python/Cargo.toml -- --check
cargo clippy --manifest-path python/Cargo.toml --locked -- -D warnings

echo "== python/: build into $venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet "pytest>=7"
# A real install from the source tree, as a user does: pip runs maturin (PEP 517).
# Optimised at level 1 here (a user's install is a full release build): the
# extension's tests need no more, and the build takes minutes less.
CARGO_PROFILE_RELEASE_OPT_LEVEL=${CARGO_PROFILE_RELEASE_OPT_LEVEL:-1} \
    "$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps ./python

echo "== pytest python/tests (python/ lint and build took $(( $(date +%s) - start )) s)"
set +e
(cd python && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
