#!/usr/bin/env python3
"""Consumer-protocol groups (KIP-848, issue #43) under failures, Jepsen-style (seeded, bounded
in time): a real Flume broker (`flume-cli broker --kafka-port`, consumer-protocol session
timeout 6 s), one topic of four partitions, an idempotent producer feeding RECORDS records
(each value unique), and consumers (confluent-kafka's Consumer with group.protocol=consumer,
manual commits), each a process of its own, that process every record they get and commit
it synchronously before the next.

    python consumer_group.py FLUME_CLI [--seed N] [--records N] [--consumers N]

Chaos at seeded random times during a window:
  * the harness SIGKILLs a consumer (no leave: its partitions move after the session timeout);
  * a consumer SIGKILLs itself between processing a record and committing it;
  * a consumer closes cleanly (a leave) and a new process takes its place;
  * the harness SIGKILLs the broker and restarts it on the same data directory and ports
    (the members are fenced and join again; committed offsets are on disk).
Dead consumers are replaced. Each consumer appends, flushed line by line, to a log of its own:
`P partition offset value` when it processed a record, `C partition offset` when
commit(asynchronous=False) confirmed the commit of `offset` (the next to read), `F` with the
error when a commit failed.

At the end, once every acknowledged record was processed and the committed offsets reached the
log ends (or the deadline passed), from the logs and the broker:
  * violation: a record the broker acknowledged that no consumer ever processed (lost);
  * violation: a partition's committed offset behind a commit a consumer saw confirmed (a
    confirmed commit went back);
  * violation: an offset below a partition's committed offset that no consumer processed (the
    group skipped it: a new owner started past the committed offset);
  * records processed more than once are counted, not violations (at least once: a consumer
    killed between processing and committing leaves its record to the next owner).
Before the run, the judge is tried on made-up histories (each kind of violation must be found).
Prints the figures and one PASS/FAIL line; exits non-zero on a violation.
"""

import argparse
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from share_queue import Broker, Feeder, conf, free_port  # noqa: E402

PARTITIONS = 4
TOPIC = "cg-input"
GROUP = "chaos-consumer-protocol"
SESSION_MS = 6000


# ---------------------------------------------------------------------------
# A consumer process.


def consumer(a):
    from confluent_kafka import Consumer, KafkaException

    rng = random.Random(f"{a.seed}/{a.consumer}")
    log = open(a.log, "a", buffering=1)

    def out(*fields):
        log.write(" ".join(str(f) for f in fields) + "\n")
        log.flush()
        os.fsync(log.fileno())

    c = Consumer(conf(a.bootstrap, **{"group.id": GROUP, "group.protocol": "consumer",
                                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                      "fetch.wait.max.ms": 100}))
    c.subscribe([TOPIC])
    chaos = time.time() < a.chaos_until
    try:
        while True:
            msg = c.poll(0.2)
            chaos = time.time() < a.chaos_until
            if msg is None:
                continue
            if msg.error():
                continue
            p, o = msg.partition(), msg.offset()
            out("P", p, o, msg.value().decode())
            if chaos and rng.random() < a.kill_p:
                out("K", "before-commit")
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                c.commit(message=msg, asynchronous=False)
                out("C", p, o + 1)
            except KafkaException as e:
                out("F", p, o + 1, str(e.args[0]).replace(" ", "_"))
            if chaos and rng.random() < a.leave_p:
                out("L", "close")
                break
    finally:
        c.close()


# ---------------------------------------------------------------------------
# The judge.


class History:
    """Every consumer log, parsed."""

    def __init__(self, logdir):
        self.processed = {}  # value -> times processed
        self.offsets = {}  # partition -> set of offsets processed
        self.confirmed = {}  # partition -> highest offset a commit was confirmed for
        self.failed_commits = 0
        self.kills = 0
        self.leaves = 0
        for path in sorted(glob.glob(os.path.join(logdir, "consumer-*.log"))):
            with open(path) as f:
                lines = f.read().split("\n")
            for line in lines:
                parts = line.split(" ")
                try:
                    if parts[0] == "P" and len(parts) == 4:
                        p, o = int(parts[1]), int(parts[2])
                        self.processed[parts[3]] = self.processed.get(parts[3], 0) + 1
                        self.offsets.setdefault(p, set()).add(o)
                    elif parts[0] == "C" and len(parts) == 3:
                        p, o = int(parts[1]), int(parts[2])
                        self.confirmed[p] = max(self.confirmed.get(p, 0), o)
                    elif parts[0] == "F":
                        self.failed_commits += 1
                    elif parts[0] == "K":
                        self.kills += 1
                    elif parts[0] == "L":
                        self.leaves += 1
                except ValueError:
                    continue  # a line cut by a kill


def judge(hist, acked, committed):
    """Violations, and figures, of a history against the records the broker acknowledged and
    the committed offsets read at the end ({partition: offset})."""
    violations = []
    lost = sorted(v for v in acked if v not in hist.processed)
    if lost:
        violations.append(f"{len(lost)} acknowledged records never processed (lost), e.g. {lost[:5]}")
    for p, o in sorted(hist.confirmed.items()):
        if committed.get(p, -1) < o:
            violations.append(f"partition {p}: committed offset {committed.get(p, -1)} behind a confirmed "
                              f"commit of {o}")
    for p, c in sorted(committed.items()):
        skipped = [o for o in range(max(c, 0)) if o not in hist.offsets.get(p, set())]
        if skipped:
            violations.append(f"partition {p}: {len(skipped)} offsets below the committed {c} never "
                              f"processed, e.g. {skipped[:5]}")
    twice = sum(1 for n in hist.processed.values() if n > 1)
    return violations, {"processed": sum(hist.processed.values()), "records": len(hist.processed),
                        "twice": twice}


def self_test():
    """The judge on made-up histories: each kind of violation is found, a record processed
    twice is not one. Returns problems."""
    cases = [  # (name, {consumer: log lines}, acked, committed, violations expected)
        ("clean", {"a": ["P 0 0 r0", "C 0 1", "P 1 0 r1", "C 1 1"]}, {"r0", "r1"}, {0: 1, 1: 1}, []),
        ("twice", {"a": ["P 0 0 r0", "K before-commit"], "b": ["P 0 0 r0", "C 0 1"]}, {"r0"}, {0: 1}, []),
        ("lost", {"a": ["P 0 0 r0", "C 0 1"]}, {"r0", "r1"}, {0: 1}, ["never processed (lost)"]),
        ("went back", {"a": ["P 0 0 r0", "C 0 1", "P 0 1 r1", "C 0 2"]}, {"r0", "r1"}, {0: 1},
         ["behind a confirmed commit"]),
        ("skipped", {"a": ["P 0 0 r0", "C 0 1"], "b": ["P 0 2 r2", "C 0 3"]}, {"r0", "r2"}, {0: 3},
         ["never processed, e.g. [1]"]),
    ]
    problems = []
    for name, logs, acked, committed, want in cases:
        with tempfile.TemporaryDirectory(prefix="flume-cg-chaos-judge.") as d:
            for c, lines in logs.items():
                with open(os.path.join(d, f"consumer-{c}.log"), "w") as f:
                    f.write("\n".join(lines) + "\n")
            violations, _ = judge(History(d), acked, committed)
        found = [w for w in want if any(w in v for v in violations)]
        if found != want or (not want and violations):
            problems.append(f"judge self-test {name}: violations {violations}, expected {want or 'none'}")
    return problems


# ---------------------------------------------------------------------------
# The harness.


def create_topic(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf(bootstrap))
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(15)


def committed_and_ends(bootstrap):
    """({partition: committed offset}, {partition: log end}), or None while the broker cannot
    answer."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer(conf(bootstrap, **{"group.id": GROUP, "enable.auto.commit": False}))
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=5)}
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)[1] for p in range(PARTITIONS)}
        return committed, ends
    except KafkaException:
        return None
    finally:
        c.close()


def run(a):
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="flume-cg-chaos.")
    logdir = os.path.join(work, "consumers")
    os.makedirs(logdir)
    blog = open(os.path.join(work, "broker.log"), "w")
    kport = free_port()
    broker = Broker(a.flume, os.path.join(work, "data"), free_port(), kport, blog)
    broker.args += ["--consumer-session-timeout-ms", str(SESSION_MS)]
    broker.start()
    bootstrap = f"127.0.0.1:{kport}"
    print(f"seed {a.seed}; logs in {work}", flush=True)
    t0 = time.monotonic()
    end = t0 + a.deadline
    chaos_s = a.deadline * 0.4
    chaos_until_wall = time.time() + chaos_s
    chaos_until = t0 + chaos_s
    procs = {}
    incarnations = {}
    outside_kills = restarts = 0
    plog = open(os.path.join(work, "consumer-stderr.log"), "w")
    me = os.path.abspath(__file__)
    state = None

    def spawn(name):
        k = incarnations.get(name, 0)
        incarnations[name] = k + 1
        return subprocess.Popen([sys.executable, me, "--consumer", f"{name}.{k}", "--bootstrap", bootstrap,
                                 "--log", os.path.join(logdir, f"consumer-{name}.{k}.log"), "--seed", str(a.seed),
                                 "--chaos-until", str(chaos_until_wall), "--kill-p", str(a.kill_p),
                                 "--leave-p", str(a.leave_p)], stdout=plog, stderr=plog)

    settled = False
    try:
        create_topic(bootstrap)
        feeder = Feeder(bootstrap, a.records, chaos_s * 0.6, topic=TOPIC, partitions=PARTITIONS)
        feeder.start()
        names = [f"c{i}" for i in range(a.consumers)]
        for n in names:
            procs[n] = spawn(n)
        next_chaos = t0 + rng.uniform(1.0, 2.5)
        next_check = 0.0
        while time.monotonic() < end:
            time.sleep(0.2)
            now = time.monotonic()
            for n, proc in list(procs.items()):
                if proc.poll() is not None:  # killed itself, or left: a new process
                    procs[n] = spawn(n)
                    restarts += 1
            if now < chaos_until and now >= next_chaos:
                if rng.random() < 0.35:
                    broker.kill_and_restart(rng.uniform(0.1, 0.8))
                else:
                    n = rng.choice(names)
                    procs[n].send_signal(signal.SIGKILL)
                    procs[n].wait()
                    outside_kills += 1
                    procs[n] = spawn(n)
                next_chaos = now + rng.uniform(1.5, 4.0)
            if now >= chaos_until and not feeder.is_alive() and now >= next_check:
                next_check = now + 1.0
                hist = History(logdir)
                if all(v in hist.processed for v in feeder.acked):
                    state = committed_and_ends(bootstrap)
                    if state and all(state[0][p] == state[1][p] for p in range(PARTITIONS)):
                        settled = True
                        break
        for proc in procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        feeder.join(5)
        if not settled:
            state = committed_and_ends(bootstrap)
        took = time.monotonic() - t0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        broker.stop()

    hist = History(logdir)
    acked = set(feeder.acked)
    committed, ends = state if state else ({}, {})
    violations, fig = judge(hist, acked, committed)
    if not settled:
        violations.append(f"not settled within {a.deadline:.0f} s (every acknowledged record processed, the "
                          f"committed offsets at the log ends): committed {committed}, ends {ends}")
    print(f"records: {a.records} produced, {len(acked)} acknowledged by the broker, {len(feeder.failed)} failed, "
          f"{feeder.left} unflushed")
    print(f"processed {fig['processed']} times {fig['records']} records, {fig['twice']} more than once; "
          f"failed commits {hist.failed_commits}; committed {committed}, log ends {ends}")
    print(f"chaos: broker kills {broker.kills}, consumer kills from outside {outside_kills}, self-kills between "
          f"processing and committing {hist.kills}, clean leaves {hist.leaves}, consumer processes "
          f"{sum(incarnations.values())} (replaced after dying or leaving {restarts})")
    print(f"violations {len(violations)}; took {took:.1f} s")
    for v in violations:
        print(f"FAIL consumer-protocol-chaos: {v}")
    blog.close()
    plog.close()
    if not violations:
        shutil.rmtree(work, ignore_errors=True)  # kept for a failure's post-mortem
        print("PASS consumer-protocol-chaos: nothing acknowledged lost, every record processed at least once, "
              "committed offsets never behind a confirmed commit and never past an unprocessed record")
    return 1 if violations else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("flume", nargs="?")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "7")))
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=60.0, help="seconds for the whole run")
    ap.add_argument("--kill-p", type=float, default=0.004, help="per record: a self-kill before the commit")
    ap.add_argument("--leave-p", type=float, default=0.004, help="per record: a clean leave")
    # A consumer process (started by the harness).
    ap.add_argument("--consumer")
    ap.add_argument("--bootstrap")
    ap.add_argument("--log")
    ap.add_argument("--chaos-until", type=float, default=0.0)
    a = ap.parse_args()
    if a.consumer:
        consumer(a)
        return 0
    if not a.flume:
        ap.error("FLUME_CLI is needed")
    broken = self_test()
    for p in broken:
        print(f"FAIL consumer-protocol-chaos: {p}")
    return 1 if broken else run(a)


if __name__ == "__main__":
    sys.exit(main())
