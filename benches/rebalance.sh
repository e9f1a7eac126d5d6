#!/usr/bin/env bash
# Rebalance time after one of three group members goes, on loopback (#15):
# clean leave and kill (no leave: its session expires) with the default
# session timeout (10 s) and a short one (1 s); each with waiting heartbeats
# (HEARTBEAT_WAIT, the default) and with plain heartbeats (the before figure).
# Median and max of RUNS runs (default 20). See benches/rebalance.rs.
#
#   benches/rebalance.sh            # release build
#   PROFILE=dev benches/rebalance.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
PROFILE=${PROFILE:-release}
cargo bench --profile "$PROFILE" --bench rebalance --no-run >/dev/null 2>&1
run() { cargo bench -q --profile "$PROFILE" --bench rebalance -- "$@" --runs "$RUNS" 2>/dev/null; }
for mode in "" --plain; do
    run clean $mode
    run kill --session-ms 10000 $mode
    run kill --session-ms 1000 $mode
done
