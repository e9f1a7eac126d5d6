#!/usr/bin/env bash
# deploy/flume.service passes `systemd-analyze verify` (Debian's systemd
# package, installed when missing), warnings included, with its ExecStart
# pointed at the flume-cli just built; and the unit's configuration file,
# deploy/flume.toml, is one the broker accepts. A few seconds; part of
# tests/run-all.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
say() { printf 'deploy: %s\n' "$*"; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
    say "installing Debian's systemd package (for systemd-analyze)"
    log="$(mktemp)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -q && apt-get install -y -q --no-install-recommends systemd; } >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        echo "error: could not install Debian's systemd package with apt-get (full log: $log)" >&2
        exit 1
    fi
    rm -f "$log"
fi

cargo build --locked -q -p flume-cli
CLI="${CARGO_TARGET_DIR:-$ROOT/target}/debug/flume-cli"
[ -x "$CLI" ] || { echo "error: no flume-cli at $CLI" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed "s#/usr/local/bin/flume-cli#$CLI#g" deploy/flume.service >"$work/flume.service"
set +e
out="$(systemd-analyze verify "$work/flume.service" 2>&1)"
rc=$?
set -e
# Unknown keys and bad values are only warnings to systemd: any line about
# the unit fails the check.
if [ "$rc" -ne 0 ] || grep -q 'flume\.service' <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "error: systemd-analyze verify deploy/flume.service failed (rc $rc)" >&2
    exit 1
fi
say "systemd-analyze verify deploy/flume.service: ok ($(systemd-analyze --version | head -n 1))"

"$CLI" broker --config deploy/flume.toml --print-config >/dev/null
say "deploy/flume.toml: accepted"
