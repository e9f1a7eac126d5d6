#!/usr/bin/env bash
# Observability with real components: a broker with --http-port, a workload,
# `promtool check metrics` on /metrics, a real Prometheus scraping the broker
# (rate() of records in must be above zero), and the dashboard in headless
# Chromium through chromedriver (live data, no console errors, screenshots in
# target/observability/). Needs no input; installs Debian's prometheus,
# chromium and chromium-driver when they are missing. Cleans up everything it
# started.
#
#   tests/observability/run.sh            # builds flume-cli (release if FLUME_PROFILE=release, else debug)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PROFILE="${FLUME_PROFILE:-debug}"
OUT="$ROOT/target/observability"
mkdir -p "$OUT"
say() { printf 'observability: %s\n' "$*"; }

# --- tools -------------------------------------------------------------------
need=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v curl >/dev/null 2>&1 || need+=(curl)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }

# --- build -------------------------------------------------------------------
if [[ "$PROFILE" == release ]]; then
    cargo build --release --locked -p flume-cli
else
    cargo build --locked -p flume-cli
fi
CLI="$ROOT/target/$PROFILE/flume-cli"

# --- processes and cleanup ----------------------------------------------------
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if ((rc != 0)); then
        for f in "$WORK"/*.log; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 30 "$f"; }; done
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT INT TERM

# N distinct free ports (all bound at once, so no two are the same).
free_ports() { python3 -c 'import socket,sys; s=[socket.socket() for _ in range(int(sys.argv[1]))]; [x.bind(("127.0.0.1",0)) for x in s]; print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"; }
# Waits (up to $2 seconds) until the command in $1 succeeds.
wait_for() {
    local what="$1" limit="$2"; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; return 1; }
        sleep 0.2
    done
}

read -r PORT HTTP PROM DRIVER KAFKA <<<"$(free_ports 5)"
BROKER="127.0.0.1:$PORT"

# --- broker and workload -------------------------------------------------------
"$CLI" broker --host 127.0.0.1 --port "$PORT" --http-port "$HTTP" --kafka-port "$KAFKA" --data "$WORK/data" \
    --share-auto-offset-reset earliest >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
wait_for "the broker's /healthz" 30 curl -fsS "http://127.0.0.1:$HTTP/healthz"
say "broker on $BROKER, HTTP on $HTTP"

"$CLI" topics create obs --partitions 3 --broker "$BROKER" >/dev/null
"$CLI" perf produce --broker "$BROKER" --topic obs --records 30000 --record-size 100 >"$WORK/produce.log" 2>&1
# A group that reads part of the topic and commits: it has lag.
"$CLI" consume --broker "$BROKER" --topic obs --group dash --max 2000 --format plain >/dev/null 2>"$WORK/consume.log"
# A share group (a queue) that accepts 500 records and releases 50 (delivered again):
# in flight, redelivered and lag on its card.
"$CLI" consume --broker "$BROKER" --topic obs --share-group jobs --max 500 --format plain >/dev/null 2>"$WORK/share.log"
"$CLI" consume --broker "$BROKER" --topic obs --share-group jobs --max 50 --release --format plain >/dev/null 2>>"$WORK/share.log"
# A consumer-protocol group (KIP-848) over the Kafka listener, a member that stays while the
# page is checked: its card shows the type, epoch and the member's partitions.
"$CLI" consume --broker "kafka://127.0.0.1:$KAFKA" --topic obs --group kip848 --group-protocol consumer \
    --follow --format plain >/dev/null 2>"$WORK/consumer-protocol.log" &
PIDS+=($!)
wait_for "the consumer-protocol group in /api/overview" 30 \
    python3 -c 'import json, sys, urllib.request
o = json.load(urllib.request.urlopen(sys.argv[1]))
sys.exit(0 if any(g["group"] == "kip848" and g.get("type") == "consumer" and g["members"] == 1
                  and g["member_list"][0]["partitions"] == "obs:0,1,2" for g in o["groups"]) else 1)' \
    "http://127.0.0.1:$HTTP/api/overview"
# A provoked error (TOPIC_ALREADY_EXISTS), for the page's recent errors.
if "$CLI" topics create obs --broker "$BROKER" >/dev/null 2>&1; then
    echo "creating an existing topic succeeded" >&2
    exit 1
fi

# --- promtool ------------------------------------------------------------------
curl -fsS "http://127.0.0.1:$HTTP/metrics" >"$OUT/metrics.txt"
promtool check metrics <"$OUT/metrics.txt"
curl -fsS -H 'Accept: application/openmetrics-text; version=1.0.0' "http://127.0.0.1:$HTTP/metrics" >"$OUT/metrics.openmetrics.txt"
grep -q '^# EOF$' "$OUT/metrics.openmetrics.txt"
say "promtool check metrics: ok ($(grep -c '^flume_' "$OUT/metrics.txt") flume samples)"
grep -q '^flume_share_partition_acknowledgements_total{group="jobs",topic="obs",partition="[0-9]*",type="release"} [1-9]' "$OUT/metrics.txt" ||
    { echo "no released records of share group jobs in /metrics" >&2; exit 1; }

# A producer that keeps running while Prometheus and the browser watch.
"$CLI" perf e2e --broker "$BROKER" --topic obs --records 100000000 --rate 2000 >"$WORK/live.log" 2>&1 &
PIDS+=($!)

# --- Prometheus ------------------------------------------------------------------
mkdir -p "$WORK/prom"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: flume
    static_configs:
      - targets: ["127.0.0.1:$HTTP"]
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/prom" \
    --web.listen-address="127.0.0.1:$PROM" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
rate_above_zero() {
    curl -fsS "http://127.0.0.1:$PROM/api/v1/query" \
        --data-urlencode 'query=sum(rate(flume_partition_records_in_total{topic="obs"}[5s]))' >"$WORK/query.json" &&
        python3 - "$WORK/query.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success", r
res = r["data"]["result"]
assert res and float(res[0]["value"][1]) > 0, res
print(res[0]["value"][1])
EOF
}
wait_for "Prometheus to see records coming in" 60 rate_above_zero
say "Prometheus: rate(flume_partition_records_in_total) = $(rate_above_zero) records/s"

# --- the dashboard in headless Chromium ------------------------------------------
chromedriver --port="$DRIVER" --allowed-ips=127.0.0.1 >"$WORK/chromedriver.log" 2>&1 &
PIDS+=($!)
wait_for "chromedriver" 30 curl -fsS "http://127.0.0.1:$DRIVER/status"
python3 "$ROOT/tests/observability/dashboard.py" "http://127.0.0.1:$DRIVER" "http://127.0.0.1:$HTTP/" "$OUT" obs dash jobs kip848
say "passed; screenshots: $OUT/dashboard.png, $OUT/dashboard-phone.png"
