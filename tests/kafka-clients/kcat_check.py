#!/usr/bin/env python3
"""Checks of kcat's and flume-cli's output for the kcat scenarios in run.sh (standard library only).

    kcat_check.py CHECK ARGS... < output

Prints the problems found on one line and exits 1, or prints nothing and exits 0.
"""

import json
import sys

SLACK_MS = 5000


def headers_list(h):
    # kcat -J prints headers as a flat [name, value, ...] list (an object in some versions)
    if isinstance(h, dict):
        return [x for kv in h.items() for x in kv]
    return h or []


def metadata(topic, partitions):
    md = json.load(sys.stdin)
    ts = [t for t in md.get("topics", []) if t.get("topic") == topic]
    if not ts:
        return [f"topic {topic} not listed among {len(md.get('topics', []))} topics"]
    t = ts[0]
    problems = []
    if t.get("err"):
        problems.append(f"topic error {t['err']}")
    ids = sorted(p["partition"] for p in t.get("partitions", []))
    if ids != list(range(int(partitions))):
        problems.append(f"partitions {ids}, expected 0..{int(partitions) - 1}")
    brokers = {b["id"] for b in md.get("brokers", [])}
    for p in t.get("partitions", []):
        if p.get("leader") not in brokers:
            problems.append(f"partition {p['partition']}: leader {p.get('leader')} not among brokers {sorted(brokers)}")
    return problems


def consume(topic, t0, t1):
    t0, t1 = int(t0), int(t1)
    recs = [json.loads(line) for line in sys.stdin if line.strip()]
    problems = []
    if len(recs) != 15:
        problems.append(f"consumed {len(recs)} of 15 records")
    key_part, seen = {}, set()
    for r in recs:
        v = r.get("payload")
        if v in seen:
            problems.append(f"{v} consumed twice")
        seen.add(v)
        try:
            i = int(v.rsplit("-v", 1)[1])
        except (AttributeError, IndexError, ValueError):
            problems.append(f"unexpected record {v!r}")
            continue
        if r.get("key") != f"{topic}-k{i % 5}":
            problems.append(f"{v}: key {r.get('key')!r}, expected {topic}-k{i % 5}")
        h = headers_list(r.get("headers"))
        if h != ["h1", "one", "h2", "two words"]:
            problems.append(f"{v}: headers {h}, expected h1=one, h2=two words")
        ts = r.get("ts", 0)
        if r.get("tstype") != "create" or not (t0 - SLACK_MS <= ts <= t1 + SLACK_MS):
            problems.append(f"{v}: timestamp {r.get('tstype')} {ts}, expected create time in [{t0}, {t1}] +- {SLACK_MS} ms")
        p = key_part.setdefault(r.get("key"), r.get("partition"))
        if p != r.get("partition"):
            problems.append(f"key {r.get('key')} in partitions {p} and {r.get('partition')}")
    want = {f"{topic}-v{i}" for i in range(15)}
    if not want <= seen:
        problems.append(f"not consumed: {sorted(want - seen)[:3]}")
    return problems


def read_members(workdir, names):
    out = {}
    for n in names:
        with open(f"{workdir}/{n}.out") as f:
            out[n] = [line.split() for line in f if line.strip()]
    return out


def group(workdir, share0, share1, produced):
    """Two members ga0, ga1 with their last assignments; every record once, each a share."""
    shares = {"ga0": {int(x) for x in share0.split()}, "ga1": {int(x) for x in share1.split()}}
    with open(produced) as f:
        want = set(f.read().split())
    problems, seen = [], []
    for name, recs in read_members(workdir, ["ga0", "ga1"]).items():
        if not recs:
            problems.append(f"{name} (partitions {sorted(shares[name])}) got no record")
        for p, _o, v in recs:
            if int(p) not in shares[name]:
                problems.append(f"{name} got a record of partition {p}, outside its share {sorted(shares[name])}")
            seen.append(v)
    if len(seen) != len(set(seen)):
        problems.append(f"{len(seen) - len(set(seen))} records seen twice")
    if set(seen) != want:
        problems.append(f"missing {len(want - set(seen))}, unexpected {len(set(seen) - want)} (seen {len(seen)} of {len(want)})")
    return problems


def restart(workdir, old_file, new_file):
    with open(old_file) as f:
        old = set(f.read().split())
    with open(new_file) as f:
        new = set(f.read().split())
    seen = [v for recs in read_members(workdir, ["gb0", "gb1"]).values() for _p, _o, v in recs]
    problems = []
    reread = [v for v in seen if v in old]
    if reread:
        problems.append(f"{len(reread)} records before the commit point re-read (e.g. {reread[0]})")
    if not new <= set(seen):
        problems.append(f"{len(new - set(seen))} of {len(new)} new records not seen")
    if len(seen) != len(set(seen)):
        # The members may join one after the other; a rebalance between auto commits
        # delivers some new records again (at-least-once): not a failure here.
        print(f"{len(seen) - len(set(seen))} new records seen twice", file=sys.stderr)
    return problems


def flume_ack():
    """flume-cli produce --format json: print 'partition offset' of the first acknowledgement."""
    a = json.loads(sys.stdin.readline())
    print(a["partition"], a["offset"])
    return []


def from_flume(partition, offset):
    line = sys.stdin.readline()
    if not line.strip():
        return ["kcat read nothing"]
    r = json.loads(line)
    want = {"key": "from-flume", "payload": "flume says hi", "partition": int(partition), "offset": int(offset)}
    got = {k: r.get(k) for k in want}
    problems = [] if got == want else [f"kcat read {got}, expected {want}"]
    if headers_list(r.get("headers")) != ["origin", "flume"]:
        problems.append(f"headers {r.get('headers')}, expected origin=flume")
    return problems


def to_flume():
    line = sys.stdin.readline()
    if not line.strip():
        return ["flume-cli consume printed nothing"]
    r = json.loads(line)
    want = {"partition": 2, "offset": 0, "key": "from-kcat", "value": "kcat says hi", "headers": {"origin": "kcat"}}
    problems = [f"{k} {r.get(k)!r}, expected {v!r}" for k, v in want.items() if r.get(k) != v]
    if not isinstance(r.get("timestamp"), int):
        problems.append(f"timestamp {r.get('timestamp')!r}, expected an integer")
    return problems


CHECKS = {
    "metadata": metadata,
    "consume": consume,
    "group": group,
    "restart": restart,
    "flume-ack": flume_ack,
    "from-flume": from_flume,
    "to-flume": to_flume,
}

if __name__ == "__main__":
    try:
        problems = CHECKS[sys.argv[1]](*sys.argv[2:])
    except (ValueError, KeyError, OSError) as e:
        problems = [f"unreadable output: {type(e).__name__}: {e}"]
    if problems:
        text = "; ".join(problems[:5])
        if len(problems) > 5:
            text += f"; ... ({len(problems)} problems)"
        print(text)
        sys.exit(1)
