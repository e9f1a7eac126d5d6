#!/usr/bin/env python3
"""Share groups (KIP-932 queues, issue #44) under failures, Jepsen-style (seeded, bounded in
time): a real Flume broker (`flume-cli broker --kafka-port`), one topic of two partitions, an
idempotent producer feeding RECORDS records (each value unique), and share consumers
(confluent-kafka's ShareConsumer, explicit acknowledgement), each a process of its own, that
accept every record they get.

    python share_queue.py FLUME_CLI [--seed N] [--records N] [--consumers N]

The group's lock is short (share.record.lock.duration.ms 2000) and its delivery limit high
(share.delivery.count.limit 10), set through IncrementalAlterConfigs on the GROUP resource
with share.auto.offset.reset earliest. Chaos at seeded random times during a window:
  * a consumer SIGKILLs itself holding records it has not acknowledged;
  * a consumer SIGKILLs itself while its commit_sync is in flight (the outcome is unknown);
  * a consumer stalls past the lock (sleeps holding its records), then acknowledges anyway:
    the broker must refuse those acknowledgements, as the records went back to the group;
  * the harness SIGKILLs a consumer from outside;
  * the harness SIGKILLs the broker and restarts it on the same data directory and ports.
Dead consumers are replaced. Each consumer appends, flushed line by line, to a log of its own:
`D` when poll returns a record (with its delivery count), `P` when its acceptance is sent,
`A` when commit_sync confirmed it for the record's partition, `F` (with the error) when it
did not.

At the end, once every record is resolved and nothing moved for a while (or the deadline
passed), from the logs:
  * violation: a record confirmed accepted twice, or delivered again after its acceptance was
    confirmed (by any consumer);
  * violation: a record produced and acknowledged by the broker, never confirmed accepted
    (lost), unless its last acceptance had an unknown outcome (killed in the commit, or an
    error other than INVALID_RECORD_STATE: the broker may have stored it; counted apart);
  * violation: a record delivered again with a delivery count not above its previous one
    (Flume writes the count before it hands a record out, so even a broker crash keeps it);
  * a record delivered again when its acceptance was NOT confirmed is a redelivery, no
    violation.
Before the run, the judge is tried on made-up histories (each kind of violation must be
found; a redelivery after a refused acceptance and an unknown outcome must not count).
Prints the figures and one PASS/FAIL line; exits non-zero on a violation.
"""

import argparse
import glob
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PARTITIONS = 2
TOPIC = "queue"
GROUP = "chaos-share"
LOCK_MS = 2000
DELIVERY_LIMIT = 10
BASE = {
    "socket.timeout.ms": 3000,
    "socket.connection.setup.timeout.ms": 3000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "metadata.max.age.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
    "log_level": 2,
}


def conf(bootstrap, **extra):
    c = dict(BASE)
    c["bootstrap.servers"] = bootstrap
    c.update(extra)
    return c


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, deadline_s=20):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


class Broker:
    def __init__(self, flume, data, port, kport, log):
        self.args = [flume, "broker", "--host", "127.0.0.1", "--port", str(port), "--kafka-port", str(kport),
                     "--data", data, "--log-level", "warn"]
        self.kport, self.log, self.proc, self.kills = kport, log, None, 0

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)
        wait_port(self.kport)

    def kill_and_restart(self, down_s):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1
        time.sleep(down_s)  # the broker is away: the clients retry
        self.start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------
# A consumer process.


def consumer(a):
    """Accepts every record it gets; logs D/P/A/F lines (flushed); self-inflicted chaos
    (SIGKILL before acknowledging, SIGKILL during commit_sync, a stall past the lock) while
    time.time() < a.chaos_until."""
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    rng = random.Random(f"{a.seed}-{a.consumer}")
    log = open(a.log, "a")

    def out(*fields):
        log.write(" ".join(str(f) for f in (f"{time.time():.6f}",) + fields) + "\n")
        log.flush()  # in the kernel: survives our SIGKILL

    def die(why):
        out("K", why)
        os.kill(os.getpid(), signal.SIGKILL)

    c = ShareConsumer(conf(a.bootstrap, **{"group.id": GROUP, "share.acknowledgement.mode": "explicit",
                                          "max.poll.records": 50, "fetch.wait.max.ms": 200}))
    c.subscribe([TOPIC])
    out("START")
    while True:
        batch = [m for m in c.poll(0.5) if m.error() is None]
        if not batch:
            continue
        for m in batch:
            out("D", m.value().decode(), m.delivery_count(), m.partition(), m.offset())
        chaos = time.time() < a.chaos_until
        roll = rng.random() if chaos else 1.0
        if roll < a.kill_p:
            die("before-ack")
        if roll < 2 * a.kill_p + a.stall_p and roll >= 2 * a.kill_p:
            stall = LOCK_MS / 1000 + rng.uniform(0.5, 1.5)
            out("S", f"{stall:.2f}")
            time.sleep(stall)  # holding the batch past its lock
        for m in batch:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            out("P", m.value().decode(), m.partition())
        timer = None
        if a.kill_p <= roll < 2 * a.kill_p:
            timer = threading.Timer(rng.uniform(0.0, 0.008), die, args=("in-commit",))
            timer.start()
        try:
            results = {tp.partition: exc for tp, exc in c.commit_sync(10).items()}
        except KafkaException as e:
            results = {m.partition(): e for m in batch}
        if timer is not None:
            timer.cancel()
            timer.join()
        for m in batch:
            exc = results.get(m.partition(), "no result for the partition")
            if exc is None:
                out("A", m.value().decode())
            else:
                out("F", m.value().decode(), str(exc).replace(" ", "_")[:120])


# ---------------------------------------------------------------------------
# The harness.


def set_group_configs(bootstrap):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient(conf(bootstrap))
    configs = {"share.record.lock.duration.ms": LOCK_MS, "share.delivery.count.limit": DELIVERY_LIMIT,
               "share.auto.offset.reset": "earliest"}
    res = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
        ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)


def create_topic(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf(bootstrap))
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(15)


class Feeder(threading.Thread):
    """An idempotent producer: `records` unique values over `over_s` seconds, round-robin over
    the partitions of `topic`."""

    def __init__(self, bootstrap, records, over_s, topic=TOPIC, partitions=PARTITIONS):
        super().__init__(daemon=True)
        self.bootstrap, self.records, self.over_s = bootstrap, records, over_s
        self.topic, self.partitions = topic, partitions
        self.acked, self.failed, self.left = set(), [], None

    def run(self):
        from confluent_kafka import Producer

        p = Producer(conf(self.bootstrap, **{"enable.idempotence": True, "linger.ms": 5,
                                             "message.timeout.ms": 60000, "retry.backoff.ms": 50}))

        def done(err, msg):
            if err is None:
                self.acked.add(msg.value().decode())
            else:
                self.failed.append(str(err))

        pace = self.over_s / self.records
        t0 = time.monotonic()
        for i in range(self.records):
            while time.monotonic() < t0 + i * pace:
                p.poll(0.005)
            while True:
                try:
                    p.produce(self.topic, f"r{i}".encode(), partition=i % self.partitions, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.01)
        self.left = p.flush(60)


class History:
    """Every consumer log, parsed."""

    def __init__(self, logdir):
        self.deliveries = {}  # value -> [(time, delivery count, consumer)]
        self.accepted = {}  # value -> [(time, consumer)] confirmed
        self.last_attempt = {}  # value -> (time, outcome): "A", "F definite", "F unknown", "P unknown"
        self.kills = {"before-ack": 0, "in-commit": 0}
        self.stalls = 0
        self.failed_acks = {}
        self.last_event = 0.0
        for path in sorted(glob.glob(os.path.join(logdir, "consumer-*.log"))):
            name = os.path.basename(path)[len("consumer-"):-len(".log")]
            pending = {}
            with open(path) as f:
                lines = f.read().split("\n")
            for line in lines:
                parts = line.split(" ")
                if len(parts) < 2:
                    continue  # the last (empty or cut) line
                try:
                    t = float(parts[0])
                except ValueError:
                    continue
                kind = parts[1]
                if kind == "D" and len(parts) >= 6:
                    self.deliveries.setdefault(parts[2], []).append((t, int(parts[3]), name))
                    self.last_event = max(self.last_event, t)
                elif kind == "P" and len(parts) >= 4:
                    pending[parts[2]] = t
                    self.last_attempt[parts[2]] = (t, "P unknown")
                elif kind == "A" and len(parts) >= 3:
                    pending.pop(parts[2], None)
                    self.accepted.setdefault(parts[2], []).append((t, name))
                    self.last_attempt[parts[2]] = (t, "A")
                    self.last_event = max(self.last_event, t)
                elif kind == "F" and len(parts) >= 4:
                    pending.pop(parts[2], None)
                    definite = "INVALID_RECORD_STATE" in parts[3].upper()
                    self.last_attempt[parts[2]] = (t, "F definite" if definite else "F unknown")
                    key = "INVALID_RECORD_STATE" if definite else parts[3][:60]
                    self.failed_acks[key] = self.failed_acks.get(key, 0) + 1
                elif kind == "K" and len(parts) >= 3 and parts[2] in self.kills:
                    self.kills[parts[2]] += 1
                elif kind == "S":
                    self.stalls += 1

    def resolved(self, value):
        """Confirmed accepted, or its last acceptance had an unknown outcome."""
        if value in self.accepted:
            return True
        last = self.last_attempt.get(value)
        return last is not None and last[1] in ("P unknown", "F unknown")


def judge(hist, produced, records):
    """The violations in a history, and its figures."""
    violations = []
    twice = [v for v, acc in hist.accepted.items() if len(acc) > 1]
    again = []
    for v, acc in hist.accepted.items():
        first = min(t for t, _ in acc)
        later = [d for d in hist.deliveries.get(v, []) if d[0] > first]
        if later:
            again.append((v, acc, later))
    lost = sorted(v for v in produced if not hist.resolved(v))
    unconfirmed = sorted(v for v in produced if v not in hist.accepted and hist.resolved(v))
    unexpected = sorted(v for v in hist.deliveries if not (v.startswith("r") and v[1:].isdigit()
                                                            and int(v[1:]) < records))
    deliveries = sum(len(d) for d in hist.deliveries.values())
    redeliveries = deliveries - len(hist.deliveries)
    counts_not_rising = 0
    for ds in hist.deliveries.values():
        cs = [dc for _, dc, _ in sorted(ds)]
        counts_not_rising += sum(1 for x, y in zip(cs, cs[1:]) if y <= x)
    over_limit = sum(1 for ds in hist.deliveries.values() for _, dc, _ in ds if dc > DELIVERY_LIMIT)
    confirmed = sum(len(acc) for acc in hist.accepted.values())
    if twice:
        v = twice[0]
        violations.append(f"{len(twice)} records confirmed accepted twice (e.g. {v}: {hist.accepted[v]})")
    if again:
        v, acc, later = again[0]
        violations.append(f"{len(again)} records delivered again after their acceptance was confirmed "
                          f"(e.g. {v}: accepted {acc}, then delivered {later})")
    if lost:
        v = lost[0]
        violations.append(f"{len(lost)} produced records never accepted (e.g. {v}: deliveries "
                          f"{hist.deliveries.get(v)}, last acceptance {hist.last_attempt.get(v)})")
    if unexpected:
        violations.append(f"{len(unexpected)} unexpected records delivered (e.g. {unexpected[0]})")
    if counts_not_rising:
        violations.append(f"{counts_not_rising} redeliveries without a higher delivery count (Flume writes the "
                          f"count before it hands a record out)")
    if over_limit:
        violations.append(f"{over_limit} deliveries past the delivery limit {DELIVERY_LIMIT}")
    fig = {"deliveries": deliveries, "redeliveries": redeliveries, "counts_not_rising": counts_not_rising,
           "confirmed": confirmed, "unconfirmed": len(unconfirmed)}
    return violations, fig


def self_test():
    """The judge on made-up histories: each kind of violation is found, a redelivery after an
    unconfirmed acceptance and an unknown outcome are not violations. Returns problems."""
    ir = "KafkaError{code=INVALID_RECORD_STATE}"
    cases = [  # (name, {consumer: log lines}, violations expected (substrings), figures expected)
        ("clean", {"a": ["1 D r0 1 0 0", "2 P r0 0", "3 A r0"]}, [], {"confirmed": 1}),
        ("accepted twice", {"a": ["1 D r0 1 0 0", "2 P r0 0", "3 A r0"],
                            "b": ["0.5 D r0 1 0 0", "4 P r0 0", "5 A r0"]}, ["accepted twice"], {}),
        ("delivered after accept", {"a": ["1 D r0 1 0 0", "2 P r0 0", "3 A r0"], "b": ["4 D r0 2 0 0"]},
         ["delivered again after"], {}),
        ("lost", {"a": ["1 D r0 1 0 0"]}, ["never accepted"], {}),
        ("refused, never back", {"a": ["1 D r0 1 0 0", "2 P r0 0", f"3 F r0 {ir}"]}, ["never accepted"], {}),
        ("redelivered after a refusal", {"a": ["1 D r0 1 0 0", "2 P r0 0", f"5 F r0 {ir}"],
                                         "b": ["4 D r0 2 0 0", "6 P r0 0", "7 A r0"]}, [], {"redeliveries": 1}),
        ("unknown outcome", {"a": ["1 D r0 1 0 0", "2 P r0 0", "2.1 K in-commit"]}, [], {"unconfirmed": 1}),
        ("count not rising", {"a": ["1 D r0 1 0 0", "2 K before-ack"], "b": ["4 D r0 1 0 0", "5 P r0 0", "6 A r0"]},
         ["without a higher delivery count"], {}),
    ]
    problems = []
    for name, logs, want, want_fig in cases:
        with tempfile.TemporaryDirectory(prefix="flume-share-chaos-judge.") as d:
            for c, lines in logs.items():
                with open(os.path.join(d, f"consumer-{c}.log"), "w") as f:
                    f.write("\n".join(lines) + "\n")
            violations, fig = judge(History(d), {"r0"}, 1)
        found = [w for w in want if any(w in v for v in violations)]
        if found != want or (not want and violations):
            problems.append(f"judge self-test {name}: violations {violations}, expected {want or 'none'}")
        for k, v in want_fig.items():
            if fig[k] != v:
                problems.append(f"judge self-test {name}: {k} {fig[k]}, expected {v}")
    return problems


def run(a):
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="flume-share-chaos.")
    logdir = os.path.join(work, "consumers")
    os.makedirs(logdir)
    blog = open(os.path.join(work, "broker.log"), "w")
    kport = free_port()
    broker = Broker(a.flume, os.path.join(work, "data"), free_port(), kport, blog)
    broker.start()
    bootstrap = f"127.0.0.1:{kport}"
    print(f"seed {a.seed}; logs in {work}", flush=True)
    t0 = time.monotonic()
    end = t0 + a.deadline
    chaos_s = a.deadline * 0.45
    chaos_until_wall = time.time() + chaos_s
    chaos_until = t0 + chaos_s
    procs = {}
    incarnations = {}
    outside_kills = restarts = 0
    plog = open(os.path.join(work, "consumer-stderr.log"), "w")
    me = os.path.abspath(__file__)

    def spawn(name):
        k = incarnations.get(name, 0)
        incarnations[name] = k + 1
        return subprocess.Popen([sys.executable, me, "--consumer", f"{name}.{k}", "--bootstrap", bootstrap,
                                 "--log", os.path.join(logdir, f"consumer-{name}.{k}.log"), "--seed", str(a.seed),
                                 "--chaos-until", str(chaos_until_wall), "--kill-p", str(a.kill_p),
                                 "--stall-p", str(a.stall_p)], stdout=plog, stderr=plog)

    try:
        create_topic(bootstrap)
        set_group_configs(bootstrap)
        feeder = Feeder(bootstrap, a.records, chaos_s * 0.4)
        feeder.start()
        names = [f"c{i}" for i in range(a.consumers)]
        for n in names:
            procs[n] = spawn(n)
        next_chaos = t0 + rng.uniform(1.0, 2.5)
        quiet_s = LOCK_MS / 1000 + 2.0
        settled = False
        hist = None
        while time.monotonic() < end:
            time.sleep(0.2)
            now = time.monotonic()
            for n, proc in list(procs.items()):
                if proc.poll() is not None:  # killed itself (or failed): a new process
                    procs[n] = spawn(n)
                    restarts += 1
            if now < chaos_until and now >= next_chaos:
                if rng.random() < 0.4:
                    broker.kill_and_restart(rng.uniform(0.1, 0.8))
                else:
                    n = rng.choice(names)
                    procs[n].send_signal(signal.SIGKILL)
                    procs[n].wait()
                    outside_kills += 1
                    procs[n] = spawn(n)
                next_chaos = now + rng.uniform(1.5, 4.0)
            if now >= chaos_until and not feeder.is_alive():
                hist = History(logdir)
                if all(hist.resolved(v) for v in feeder.acked) and time.time() - hist.last_event > quiet_s:
                    settled = True
                    break
        for proc in procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        feeder.join(5)
        took = time.monotonic() - t0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        broker.stop()

    hist = History(logdir)
    produced = set(feeder.acked)
    violations, fig = judge(hist, produced, a.records)
    if not settled:
        violations.append(f"not settled within {a.deadline:.0f} s (every record resolved, then quiet {quiet_s:.0f} s)")
    print(f"records: {a.records} produced, {len(produced)} acknowledged by the broker, {len(feeder.failed)} failed, "
          f"{feeder.left} unflushed")
    print(f"deliveries {fig['deliveries']} of {len(hist.deliveries)} records, redeliveries {fig['redeliveries']}, "
          f"delivery counts not rising {fig['counts_not_rising']}, max delivery count "
          f"{max((dc for ds in hist.deliveries.values() for _, dc, _ in ds), default=0)}")
    print(f"confirmed accepts {fig['confirmed']} of {len(hist.accepted)} records; accepted with an unknown outcome "
          f"(never confirmed, never back) {fig['unconfirmed']}; failed acknowledgements {hist.failed_acks}")
    print(f"chaos: broker kills {broker.kills}, consumer kills from outside {outside_kills}, self-kills before "
          f"acknowledging {hist.kills['before-ack']}, self-kills in commit_sync {hist.kills['in-commit']}, "
          f"stalls past the lock {hist.stalls}, consumer processes {sum(incarnations.values())} "
          f"(restarted after dying {restarts})")
    print(f"violations {len(violations)}; took {took:.1f} s")
    for v in violations:
        print(f"FAIL share-chaos: {v}")
    if not violations:
        print("PASS share-chaos: no record lost, none confirmed accepted twice or delivered after a confirmed accept")
    return 1 if violations else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("flume", nargs="?")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "7")))
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=50.0, help="seconds for the whole run")
    ap.add_argument("--kill-p", type=float, default=0.015, help="per batch: each kind of self-kill")
    ap.add_argument("--stall-p", type=float, default=0.02, help="per batch: a stall past the lock")
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
        print(f"FAIL share-chaos: {p}")
    return 1 if broken else run(a)


if __name__ == "__main__":
    sys.exit(main())
