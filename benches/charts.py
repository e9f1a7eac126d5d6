#!/usr/bin/env python3
"""Draws the benchmark results in benches/results/*.json as SVG bar charts.

    python3 benches/charts.py                 # writes docs/perf/<benchmark>[-<measure>].svg
    python3 benches/charts.py --out DIR       # somewhere else (tests/docs/run.sh diffs the two)

Python 3 standard library only; the SVG is written by hand, so the output depends on the data
alone (no fonts measured, no timestamps) and the checked-in charts can be compared byte for byte.

A results file (one per benchmark):

    {
      "title": "...", "machine": "...", "command": "...", "peer": "...", "notes": "...",
      "earlier_findings": ["..."],              # optional: figures of earlier builds, not drawn
      "measures": [
        {"id": "throughput", "title": "...", "unit": "records/s", "better": "higher",
         "target": "...",                       # optional, in words
         "target_value": 0.5,                   # optional: drawn as a dashed line
         "ours": ["Flume"],                     # optional: the bars drawn in Flume's colour, or
                                                #   "all" (default: names that start "Flume")
         "runs": [
           {"label": "run 1", "date": "2026-11-30", "conditions": "quiet machine",
            "earlier": false,                   # optional: an earlier build, kept as data, not drawn
            "figures": {"Flume": 2.0e6,                         # one figure
                        "Redis": {"values": [339e3, 418e3]},    # several: median, range
                        "Other": {"low": 1.0, "high": 2.0},     # a range only
                        "Last": {"median": 6, "max": 19}}}      # or with its median
         ]}
      ]
    }

Each measure becomes one chart: a group of horizontal bars per run (its label, or the run's
number), one bar per system, the length the figure (the median of several), a whisker for a
range. One file is written per measure: `<benchmark>.svg` when the file has one measure, else
`<benchmark>-<measure id>.svg`.
"""

import argparse
import json
import math
import sys
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results"
OUT = ROOT / "docs" / "perf"

WIDTH = 760
LABEL_W = 300  # the systems' names, left of the bars
VALUE_W = 110  # the figures, right of the bars
BAR_H = 16
BAR_GAP = 4
GROUP_GAP = 12
GROUP_HEAD = 18
TOP = 52
BOTTOM = 30
OURS = "#2b6cb0"
PEER = "#a0aec0"
FONT = "font-family:sans-serif"


class DataError(Exception):
    pass


def fmt(v):
    """A figure as people write it: 2.09 M, 339 k, 14.1, 0.26."""
    a = abs(v)
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if a >= scale:
            return f"{v / scale:.3g}{suffix}"
    if a == 0:
        return "0"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def figure(raw, where):
    """(length, low, high, text) of one figure; low/high None without a range."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw), None, None, fmt(raw)
    if isinstance(raw, dict):
        if "values" in raw:
            vs = sorted(float(v) for v in raw["values"])
            if not vs:
                raise DataError(f"{where}: empty values")
            n = len(vs)
            med = vs[n // 2] if n % 2 else (vs[n // 2 - 1] + vs[n // 2]) / 2
            text = ", ".join(fmt(v) for v in raw["values"])
            return med, vs[0], vs[-1], text
        if "median" in raw and "max" in raw:
            med, top = float(raw["median"]), float(raw["max"])
            return med, med, top, f"{fmt(med)} (max {fmt(top)})"
        if "low" in raw and "high" in raw:
            lo, hi = float(raw["low"]), float(raw["high"])
            if lo > hi:
                raise DataError(f"{where}: low {lo} above high {hi}")
            mid = raw.get("median")
            if mid is not None:
                return float(mid), lo, hi, f"{fmt(mid)} ({fmt(lo)} to {fmt(hi)})"
            return None, lo, hi, f"{fmt(lo)} to {fmt(hi)}"
    raise DataError(
        f"{where}: a figure is a number, {{values: [...]}}, {{low, high[, median]}} "
        f"or {{median, max}}: {raw!r}"
    )


def nice_max(v):
    if v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def chart(bench, measure, source):
    where = f"{source}: measure {measure.get('id')!r}"
    ours = measure.get("ours")
    runs = [r for r in measure["runs"] if not r.get("earlier")]
    if not runs:
        raise DataError(f"{where}: no run to draw")
    groups = []
    for i, run in enumerate(runs, 1):
        label = run.get("label") or (f"run {i}" if len(runs) > 1 else "")
        if run.get("conditions") and len(runs) > 1:
            label = f"{label}: {run['conditions']}"
        bars = []
        for system, raw in run["figures"].items():
            length, lo, hi, text = figure(raw, f"{where}, run {i}, {system}")
            if ours is None:
                mine = system.startswith("Flume")
            else:
                mine = ours == "all" or system in ours
            bars.append((system, length, lo, hi, text, mine))
        groups.append((label, bars))
    top = max(max(x for x in (b[1], b[3]) if x is not None) for _, bars in groups for b in bars)
    target = measure.get("target_value")
    if target is not None:
        top = max(top, float(target))
    scale_max = nice_max(top)
    plot_w = WIDTH - LABEL_W - VALUE_W - 20
    x0 = LABEL_W + 10

    def x(v):
        return x0 + plot_w * v / scale_max

    height = TOP + BOTTOM
    for label, bars in groups:
        height += (GROUP_HEAD if label else 0) + len(bars) * (BAR_H + BAR_GAP) + GROUP_GAP
    title = measure.get("title") or bench["title"]
    better = measure.get("better", "higher")
    sub = f"{measure['unit']}, {better} is better"
    if measure.get("target"):
        sub += f"; target: {measure['target']}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="20" style="{FONT};font-size:14px;font-weight:bold">{escape(title)}</text>',
        f'<text x="10" y="38" style="{FONT};font-size:11px" fill="#4a5568">{escape(sub)}</text>',
    ]
    y = TOP
    for label, bars in groups:
        if label:
            out.append(
                f'<text x="10" y="{y + 12}" style="{FONT};font-size:11px;font-style:italic" '
                f'fill="#4a5568">{escape(label)}</text>'
            )
            y += GROUP_HEAD
        for system, length, lo, hi, text, mine in bars:
            colour = OURS if mine else PEER
            mid = y + BAR_H / 2
            out.append(
                f'<text x="{LABEL_W}" y="{mid + 4:.1f}" text-anchor="end" '
                f'style="{FONT};font-size:11px">{escape(system)}</text>'
            )
            if length is not None:
                out.append(
                    f'<rect x="{x0}" y="{y}" width="{x(length) - x0:.1f}" height="{BAR_H}" '
                    f'fill="{colour}"/>'
                )
            else:  # a range only: solid to its low end, light to its high end
                out.append(
                    f'<rect x="{x0}" y="{y}" width="{x(lo) - x0:.1f}" height="{BAR_H}" '
                    f'fill="{colour}"/>'
                )
                out.append(
                    f'<rect x="{x(lo):.1f}" y="{y}" width="{x(hi) - x(lo):.1f}" height="{BAR_H}" '
                    f'fill="{colour}" fill-opacity="0.35"/>'
                )
            if length is not None and lo is not None and hi is not None and hi > lo:
                out.append(
                    f'<path d="M{x(lo):.1f} {mid:.1f}H{x(hi):.1f}M{x(lo):.1f} {y + 3}V{y + BAR_H - 3}'
                    f'M{x(hi):.1f} {y + 3}V{y + BAR_H - 3}" stroke="#1a202c" stroke-width="1"/>'
                )
            end = max(v for v in (length, hi) if v is not None)
            out.append(
                f'<text x="{x(end) + 5:.1f}" y="{mid + 4:.1f}" style="{FONT};font-size:11px">'
                f"{escape(text)}</text>"
            )
            y += BAR_H + BAR_GAP
        y += GROUP_GAP
    out.append(
        f'<line x1="{x0}" y1="{TOP - 4}" x2="{x0}" y2="{y}" stroke="#1a202c" stroke-width="1"/>'
    )
    if target is not None:
        tx = x(float(target))
        out.append(
            f'<line x1="{tx:.1f}" y1="{TOP - 4}" x2="{tx:.1f}" y2="{y}" stroke="#c53030" '
            f'stroke-width="1" stroke-dasharray="4 3"/>'
        )
        out.append(
            f'<text x="{tx:.1f}" y="{y + 16}" text-anchor="middle" style="{FONT};font-size:10px" '
            f'fill="#c53030">target {escape(fmt(float(target)))}</text>'
        )
    out.append(
        f'<text x="{x0}" y="{y + 16}" style="{FONT};font-size:10px" fill="#4a5568">0</text>'
    )
    out.append(
        f'<text x="{x0 + plot_w}" y="{y + 16}" text-anchor="end" style="{FONT};font-size:10px" '
        f'fill="#4a5568">{escape(fmt(scale_max))} {escape(measure["unit"])}</text>'
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def load(path):
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON: {e}") from e
    for key in ("title", "machine", "command", "measures"):
        if key not in data:
            raise DataError(f"{path}: missing {key!r}")
    for m in data["measures"]:
        for key in ("id", "unit", "runs"):
            if key not in m:
                raise DataError(f"{path}: a measure is missing {key!r}")
        for r in m["runs"]:
            if "date" not in r or "figures" not in r:
                raise DataError(f"{path}: measure {m['id']!r}: every run needs a date and figures")
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the SVGs (default docs/perf)")
    args = ap.parse_args()
    files = sorted(RESULTS.glob("*.json"))
    if not files:
        print(f"no results in {RESULTS}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for path in files:
            data = load(path)
            name = path.stem
            measures = data["measures"]
            for m in measures:
                svg = chart(data, m, path.name)
                fname = f"{name}.svg" if len(measures) == 1 else f"{name}-{m['id']}.svg"
                (args.out / fname).write_text(svg, encoding="utf-8")
                written.append(fname)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    stale = sorted(p.name for p in args.out.glob("*.svg") if p.name not in written)
    for name in stale:
        (args.out / name).unlink()
    print(f"{len(written)} charts from {len(files)} results files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
