#!/usr/bin/env bash
# The book in docs/: builds it with mdBook and fails on any broken local link or anchor, in the
# built HTML and in the Markdown (README.md, tests/**/README.md, docs/**), and on charts in
# docs/perf/ that are not what `python3 benches/charts.py` makes of benches/results/ (so the
# SVGs cannot drift from the data). Needs python3 and, on the first run, cargo and crates.io:
# Debian has no mdbook package, so mdBook is built once into the cache.
#
#   tests/docs/run.sh            # about 2 s with a warm cache
#
# Cache: ${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}/mdbook (the binary, pinned below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
say() { printf 'docs: %s\n' "$*"; }
cache="${FLUME_CACHE:-${TMPDIR:-/tmp}/flume-ci-cache}"
MDBOOK_VERSION=0.5.4
mdbook="$cache/mdbook/bin/mdbook"

# --- mdBook ------------------------------------------------------------------------------------
if ! "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    say "installing mdbook $MDBOOK_VERSION into $cache/mdbook (once; a few minutes)"
    command -v cargo >/dev/null || { echo "cargo is needed to install mdbook" >&2; exit 1; }
    # Only the HTML renderer and its search index: no `serve`/`watch` (an HTTP server and a
    # file watcher that CI does not use).
    cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features \
        --features search --root "$cache/mdbook" --quiet
fi

# --- the charts match their data -----------------------------------------------------------------
charts="$(mktemp -d)"
trap 'rm -rf "$charts"' EXIT
python3 benches/charts.py --out "$charts" >/dev/null
if ! diff -r docs/perf "$charts" >/dev/null; then
    diff -r docs/perf "$charts" | head -20 >&2 || true
    echo "error: docs/perf/ is not what benches/results/ draws: run python3 benches/charts.py and commit docs/perf/" >&2
    exit 1
fi
say "charts in docs/perf/ match benches/results/"

# --- the checker finds what it must (a checker that passes everything would pass here too) ------
mkdir -p "$charts/md/sub"
printf '# Top\n\n## A heading, with `code`\n\n[ok](sub/b.md#second) [ok](#a-heading-with-code) `[not a link](nope.md)`\n' >"$charts/md/a.md"
printf '# B\n\n## Second\n\n[bad](../missing.md) [bad anchor](../a.md#nowhere) [web](https://example.com/x.md)\n\n```\n[in code](nope.md)\n```\n' >"$charts/md/sub/b.md"
if out=$(python3 tests/docs/check_links.py "$charts/md" 2>&1); then
    echo "error: check_links.py passed a directory with two broken links: $out" >&2
    exit 1
fi
if [[ "$(grep -c 'sub/b.md' <<<"$out")" != 2 ]] || ! grep -q 'missing.md' <<<"$out" || ! grep -q '#nowhere' <<<"$out"; then
    echo "error: check_links.py did not report exactly the two broken links:" >&2
    echo "$out" >&2
    exit 1
fi
printf '# B\n\n## Second\n\n[back](../a.md#top) [web](https://example.com/x.md)\n' >"$charts/md/sub/b.md"
python3 tests/docs/check_links.py "$charts/md" >/dev/null
say "the link checker finds a missing file and a missing anchor, and passes good links"

# --- build and check -----------------------------------------------------------------------------
rm -rf docs/book
"$mdbook" build docs 2>"$charts/mdbook.log" || { cat "$charts/mdbook.log" >&2; exit 1; }
if grep -E '(WARN|ERROR)' "$charts/mdbook.log" >&2; then
    echo "error: mdbook warned (above)" >&2
    exit 1
fi
say "book built in docs/book/"
python3 tests/docs/check_links.py --book docs/book README.md tests/README.md \
    tests/kafka-clients/README.md tests/librdkafka/README.md docs
