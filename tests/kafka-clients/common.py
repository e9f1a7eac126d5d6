"""Shared scenario logic for the Python Kafka clients (standard library only).

Each client file (confluent_test.py, kafka_python_test.py) supplies small adapters
(create a topic, read metadata, produce, consume from the beginning, read committed
offsets, run a group member); this module holds the records, the checks and the
driver of the two-process consumer group, so both clients are judged the same way.

Output: one line per scenario, `PASS <client> <scenario>` or
`FAIL <client> <scenario>: <reason>`, on stdout. Everything else goes to stderr.
"""

import json
import os
import subprocess
import sys
import threading
import time
import traceback

PARTITIONS = 4
GROUP_RECORDS_PER_PARTITION = 10
RESTART_RECORDS_PER_PARTITION = 5
# Timestamps the broker gives back must fall within this window around the produce call.
TIMESTAMP_SLACK_MS = 5000
DEADLINE_S = float(os.environ.get("KAFKA_CLIENTS_DEADLINE_S", "25"))
# KAFKA_CLIENTS_AUTO_CREATE=1: topics are created by the broker on first use (a metadata
# request for them) instead of CreateTopics, for brokers without CreateTopics such as
# librdkafka's mock cluster (mock_broker.py), which checks this harness itself.
AUTO_CREATE = os.environ.get("KAFKA_CLIENTS_AUTO_CREATE") == "1"


# One line at a time on stdout and stderr: several Reporters may run in threads of one
# process (stream_apps.py runs two libraries side by side).
_OUT = threading.Lock()


def log(*args):
    with _OUT:
        print(*args, file=sys.stderr, flush=True)


def say(line):
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now_ms():
    return int(time.time() * 1000)


class Reporter:
    """Runs scenarios with a watchdog: a client call that hangs past its deadline is a
    FAIL, and the scenarios after it are failed as not run (a hung client thread cannot
    be stopped; `finish` exits the process without waiting for it)."""

    def __init__(self, client):
        self.client = client
        self.failed = 0
        self.passed = 0
        self.hung = None

    def run(self, name, fn, *args, timeout=None):
        timeout = timeout or 2 * DEADLINE_S + 20
        started = time.monotonic()
        if self.hung:
            problems = [f"not run: scenario {self.hung} hung"]
        else:
            result = {}

            def body():
                try:
                    result["problems"] = fn(*args) or []
                except Exception as e:  # a client error is a scenario failure, never a crash
                    log(traceback.format_exc())
                    result["problems"] = [f"{type(e).__name__}: {e}"]

            t = threading.Thread(target=body, daemon=True)
            t.start()
            t.join(timeout)
            if t.is_alive():
                self.hung = name
                problems = [f"hung: no answer within {timeout:.0f}s"]
            else:
                problems = result["problems"]
        took = time.monotonic() - started
        if problems:
            self.failed += 1
            text = "; ".join(str(p) for p in problems[:5])
            if len(problems) > 5:
                text += f"; ... ({len(problems)} problems)"
            say(f"FAIL {self.client} {name}: {text} ({took:.1f}s)")
        else:
            self.passed += 1
            say(f"PASS {self.client} {name} ({took:.1f}s)")
        return not problems

    def finish(self):
        """Exit now: 1 if anything failed. Does not wait for hung client threads."""
        for m in list(MEMBERS):
            m.kill()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1 if self.failed else 0)


# ---------------------------------------------------------------------------
# Keyed produce with headers, consume back


def produce_plan(prefix):
    """The records of the produce scenario.

    Keys k0..k4 three times each (partition by key must be consistent), headers
    including a repeated name and a binary value, one record without a key, one
    with an explicit timestamp an hour ago (kept exactly).
    """
    recs = []
    for i in range(15):
        recs.append(
            {
                "key": f"{prefix}-k{i % 5}".encode(),
                "value": f"{prefix}-v{i}".encode(),
                "headers": [("h1", b"one"), ("bin", bytes([0, 255, 10, i])), ("h1", b"dup")],
                "timestamp": None,
            }
        )
    recs.append({"key": None, "value": f"{prefix}-nokey".encode(), "headers": [], "timestamp": None})
    recs.append(
        {
            "key": f"{prefix}-kts".encode(),
            "value": f"{prefix}-explicit-ts".encode(),
            "headers": [("ts", b"explicit")],
            "timestamp": now_ms() - 3_600_000,
        }
    )
    return recs


def check_consumed(plan, delivered, consumed, t0, t1):
    """plan: produce_plan(); delivered: value -> (partition, offset) from delivery
    reports; consumed: list of dicts value/key/headers/timestamp/partition/offset
    (headers as a list of (str, bytes), [] when none). Returns problems."""
    problems = []
    by_value = {}
    for c in consumed:
        if c["value"] in by_value:
            problems.append(f"value {c['value']!r} consumed twice")
        by_value[c["value"]] = c
    expected_values = {r["value"] for r in plan}
    for v in by_value:
        if v not in expected_values:
            problems.append(f"unexpected record {v!r}")
    key_partition = {}
    for r in plan:
        c = by_value.get(r["value"])
        if c is None:
            problems.append(f"record {r['value']!r} not consumed")
            continue
        if c["key"] != r["key"]:
            problems.append(f"{r['value']!r}: key {c['key']!r}, expected {r['key']!r}")
        if list(c["headers"]) != list(r["headers"]):
            problems.append(f"{r['value']!r}: headers {c['headers']!r}, expected {r['headers']!r}")
        if r["timestamp"] is not None:
            if c["timestamp"] != r["timestamp"]:
                problems.append(f"{r['value']!r}: timestamp {c['timestamp']}, expected exactly {r['timestamp']}")
        elif not (t0 - TIMESTAMP_SLACK_MS <= c["timestamp"] <= t1 + TIMESTAMP_SLACK_MS):
            problems.append(f"{r['value']!r}: timestamp {c['timestamp']} outside [{t0}, {t1}] +- {TIMESTAMP_SLACK_MS} ms")
        d = delivered.get(r["value"])
        if d is not None and (c["partition"], c["offset"]) != d:
            problems.append(f"{r['value']!r}: consumed at {c['partition']}/{c['offset']}, delivery report said {d[0]}/{d[1]}")
        if r["key"] is not None:
            p = key_partition.setdefault(r["key"], c["partition"])
            if p != c["partition"]:
                problems.append(f"key {r['key']!r} in partitions {p} and {c['partition']}")
    return problems


def check_delivered(plan, delivered):
    problems = []
    for r in plan:
        if r["value"] not in delivered:
            problems.append(f"no delivery report for {r['value']!r}")
    key_partition = {}
    for r in plan:
        d = delivered.get(r["value"])
        if d is None or r["key"] is None:
            continue
        p = key_partition.setdefault(r["key"], d[0])
        if p != d[0]:
            problems.append(f"key {r['key']!r} delivered to partitions {p} and {d[0]}")
    offsets = sorted(delivered.values())
    if len(set(offsets)) != len(offsets):
        problems.append("two records got the same partition/offset")
    return problems


# ---------------------------------------------------------------------------
# Consumer group of two processes


MEMBERS = []  # every member process started, killed by Reporter.finish if still running


class Member:
    """A group member subprocess speaking JSON lines on stdout:
    {"ev":"assigned","partitions":[...]}, {"ev":"record","p":..,"o":..,"v":".."},
    {"ev":"error","msg":".."}; it stops (commit, leave, close) on "stop" on stdin."""

    def __init__(self, name, cmd, errlog):
        self.name = name
        self.assignment = None  # None: never assigned yet
        self.records = []
        self.errors = []
        self.commit_failures = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, text=True
        )
        MEMBERS.append(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                log(f"[{self.name}] {line.rstrip()}")
                continue
            with self.lock:
                if ev["ev"] == "assigned":
                    self.assignment = sorted(ev["partitions"])
                elif ev["ev"] == "record":
                    self.records.append((ev["p"], ev["o"], ev["v"]))
                elif ev["ev"] == "error":
                    self.errors.append(ev["msg"])
                elif ev["ev"] == "commit_failed":
                    self.commit_failures.append(ev["msg"])

    def snapshot(self):
        with self.lock:
            return self.assignment, list(self.records), list(self.errors)

    def failed_commits(self):
        with self.lock:
            return list(self.commit_failures)

    def stop(self, timeout):
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"{self.name} did not close within {timeout}s (killed)"
        self.reader.join(timeout=2)
        if code != 0:
            return f"{self.name} exited with code {code}"
        return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(cond, deadline_s, what):
    """Poll cond() until it returns a truthy value or the deadline passes."""
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def split_ok(members, partitions):
    shares = [m.snapshot()[0] for m in members]
    if any(not s for s in shares):
        return False
    seen = [p for s in shares for p in s]
    return len(seen) == len(set(seen)) and sorted(seen) == list(range(partitions))


def run_group(client, prefix, topic, group, member_cmd, produce_to_partitions, committed, logdir):
    """Scenarios `group` and `group-restart`. Returns (problems_group, problems_restart)."""

    def start(tag):
        ms = []
        for i in range(2):
            name = f"{client}-{tag}-{i}"
            errlog = open(os.path.join(logdir, name + ".log"), "w")
            ms.append(Member(name, member_cmd(group, topic), errlog))
        return ms

    def describe(ms):
        out = []
        for m in ms:
            a, r, e = m.snapshot()
            out.append(f"{m.name}: assignment {a}, {len(r)} records, errors {e[:2]}")
        return "; ".join(out)

    def collect(ms, n, what):
        def enough():
            return sum(len(m.snapshot()[1]) for m in ms) >= n or any(m.proc.poll() is not None for m in ms)

        try:
            wait_for(enough, DEADLINE_S, what)
        except TimeoutError as e:
            return [f"{e} ({describe(ms)})"]
        return []

    def stop_all(ms):
        return [p for p in (m.stop(15) for m in ms) if p]

    # Phase 1: two members split the partitions, then the records arrive.
    group_problems = []
    members = start("a")
    try:
        try:
            wait_for(lambda: split_ok(members, PARTITIONS), DEADLINE_S, "two members with disjoint non-empty assignments covering every partition")
        except TimeoutError as e:
            return [f"{e} ({describe(members)})"], ["not run: the group did not form"]
        shares = {m.name: m.snapshot()[0] for m in members}
        phase1 = produce_to_partitions(topic, "old", GROUP_RECORDS_PER_PARTITION)
        total = GROUP_RECORDS_PER_PARTITION * PARTITIONS
        group_problems += collect(members, total, f"{total} records in the group")
        group_problems += stop_all(members)
    finally:
        for m in members:
            m.kill()
    seen = []
    for m in members:
        _, recs, errs = m.snapshot()
        group_problems += [f"{m.name}: {e}" for e in errs]
        # No rebalance is expected once the split is stable: every commit must succeed.
        group_problems += [f"{m.name}: commit failed: {e}" for e in m.failed_commits()[:2]]
        if not recs:
            group_problems.append(f"{m.name} (partitions {shares[m.name]}) got no record")
        for p, o, v in recs:
            if p not in shares[m.name]:
                group_problems.append(f"{m.name} got a record of partition {p}, outside its share {shares[m.name]}")
        seen += [v for _, _, v in recs]
    want = set(phase1)
    dups = len(seen) - len(set(seen))
    if dups:
        group_problems.append(f"{dups} records seen twice")
    if set(seen) != want:
        group_problems.append(f"missing {len(want - set(seen))}, unexpected {len(set(seen) - want)}")
    try:
        got = committed(group, topic, PARTITIONS)
        wanted = {p: GROUP_RECORDS_PER_PARTITION for p in range(PARTITIONS)}
        if got != wanted:
            group_problems.append(f"committed offsets {got}, expected {wanted}")
    except Exception as e:
        group_problems.append(f"reading committed offsets: {type(e).__name__}: {e}")

    # Phase 2: records arrive while the group is down; a restarted group resumes
    # from its commits: none of phase 1 again, every new record seen. The two members
    # may join one after the other, so a rebalance can interrupt them: a failed commit
    # and a new record seen twice are then normal (at-least-once), not failures.
    restart_problems = []
    phase2 = produce_to_partitions(topic, "new", RESTART_RECORDS_PER_PARTITION)
    members = start("b")
    try:
        n = RESTART_RECORDS_PER_PARTITION * PARTITIONS
        restart_problems += collect(members, n, f"{n} new records after the restart")
        restart_problems += stop_all(members)
    finally:
        for m in members:
            m.kill()
    seen = []
    for m in members:
        _, recs, errs = m.snapshot()
        restart_problems += [f"{m.name}: {e}" for e in errs]
        seen += [v for _, _, v in recs]
    old = [v for v in seen if v in want]
    if old:
        restart_problems.append(f"{len(old)} records before the commit point re-read (e.g. {old[0]})")
    new = set(phase2)
    if not new <= set(seen):
        restart_problems.append(f"{len(new - set(seen))} new records not seen")
    dups = len(seen) - len(set(seen))
    if dups:
        log(f"{client} group-restart: {dups} new records seen twice (a rebalance during the restart)")
    return group_problems, restart_problems


def group_values(topic, tag, partition, i):
    return f"{topic}-{tag}-p{partition}-{i}"


class MemberIO:
    """Member-side helpers: JSON events out, "stop" (or EOF) on stdin in."""

    def __init__(self):
        self.stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self):
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        self.stop.set()

    @staticmethod
    def emit(**ev):
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()


# ---------------------------------------------------------------------------
# Compaction and DeleteRecords

# A compacted topic whose cleaner runs within a second of a segment sealing: segments of
# 1 KiB (so the records below fill several) and a dirty ratio any sealed segment passes.
COMPACT_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
COMPACT_KEYS = 5
COMPACT_ROUNDS = 20
COMPACT_DELETED = (3, 4)  # the keys that get a tombstone
COMPACT_FILLERS = 60


def compaction_plan():
    """The records of a compaction scenario as a list of batches, each batch a list of
    (key, value) (value None: a tombstone): COMPACT_ROUNDS values for each of
    COMPACT_KEYS keys, a tombstone for each key in COMPACT_DELETED, then
    COMPACT_FILLERS records of another key, one batch each. A segment rolls between
    batches, never inside one, and the cleaner never touches the active segment: the
    fillers seal the segments that hold the keys, so the cleaner can clean them."""
    batches = []
    for rnd in range(COMPACT_ROUNDS):
        batches.append([(f"key-{k}".encode(), f"v{rnd}".encode()) for k in range(COMPACT_KEYS)])
    batches.append([(f"key-{k}".encode(), None) for k in COMPACT_DELETED])
    for i in range(COMPACT_FILLERS):
        batches.append([(b"filler", f"f{i}".encode())])
    return batches


def compaction_cleaned(got):
    """True once a read from the start (a list of (offset, key, value)) shows the keys
    cleaned: each of them exactly once."""
    return len([r for r in got if r[1] is not None and r[1].startswith(b"key-")]) == COMPACT_KEYS


def check_compacted(acked, got):
    """acked: offset -> (key, value) as the producer was told; got: a read of the
    partition from the start after cleaning, a list of (offset, key, value). Each key of
    the plan is there once, at its newest offset, with its newest value (None, a
    tombstone, for the deleted keys); every record read is the one acknowledged at its
    offset; fewer records are left than were produced and the first offset is gone."""
    problems = []
    newest = {}
    for o in sorted(acked):
        newest[acked[o][0]] = o
    want_value = f"v{COMPACT_ROUNDS - 1}".encode()
    for k in range(COMPACT_KEYS):
        key = f"key-{k}".encode()
        left = [r for r in got if r[1] == key]
        want = None if k in COMPACT_DELETED else want_value
        if len(left) != 1 or left[0][0] != newest.get(key) or left[0][2] != want:
            problems.append(f"{key}: {left}, expected one record at {newest.get(key)} with {want}")
    for o, k, v in got:
        if acked.get(o) != (k, v):
            problems.append(f"offset {o} reads {(k, v)}, the producer was told {acked.get(o)}")
    offsets = [r[0] for r in got]
    if offsets != sorted(set(offsets)):
        problems.append("offsets read out of order or twice")
    if not got or not len(got) < len(acked) or got[0][0] == 0:
        first = got[0][0] if got else None
        problems.append(f"{len(got)} of {len(acked)} records left, the first at {first}: nothing was cleaned")
    return problems


DELETE_RECORDS_COUNT = 10  # records produced to partition 0 of the delete-records topic
DELETE_RECORDS_BEFORE = 4  # the first DeleteRecords moves the log start here
