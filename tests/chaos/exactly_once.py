#!/usr/bin/env python3
"""Exactly-once under failures, Jepsen-style (seeded, bounded in time): a real
Flume broker (`flume-cli broker --kafka-port`) killed with SIGKILL and restarted
on the same data directory while Kafka clients (confluent-kafka, librdkafka)
work against it.

    python exactly_once.py FLUME_CLI [--seed N] [--records N]

1. An idempotent producer sends RECORDS records while the broker is killed and
   restarted twice: every record acknowledged is stored exactly once (none lost,
   none twice).
2. A transactional consume-transform-produce pipeline: two worker processes,
   each a static member (group.instance.id) of one consumer group on the input
   topic (read_committed) with a
   transactional producer (its own transactional.id) that, per polled batch,
   produces a transformed record per input record to the output topic and
   commits the input offsets in the same transaction (send_offsets_to_transaction,
   KIP-447). Workers are killed (SIGKILL) and restarted, and the broker is killed
   and restarted, at seeded random times. At the end, read_committed: every input
   record appears in the output exactly once, and the group's committed offsets
   are at the input's end (never past the output: an output record for every
   input record below the committed offset, checked by the exactly-once count).

Prints the figures (records in, out, duplicates, lost, kills) and exits non-zero
if a check fails.
"""

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 4
BASE = {
    "socket.timeout.ms": 3000,
    "socket.connection.setup.timeout.ms": 3000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "metadata.max.age.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
    "log_level": 2,
}


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
                     "--data", data, "--log-level", "warn", "--group-initial-rebalance-delay-ms", "0"]
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


def conf(bootstrap, **extra):
    c = dict(BASE)
    c["bootstrap.servers"] = bootstrap
    c.update(extra)
    return c


def read_all(bootstrap, topic, isolation, want_total, deadline_s=30):
    """Every record of `topic` from the start: a list of (partition, offset, value)."""
    c = Consumer(conf(bootstrap, **{"group.id": f"check-{topic}-{time.time()}", "enable.auto.commit": False,
                                    "isolation.level": isolation, "auto.offset.reset": "earliest"}))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    end = time.monotonic() + deadline_s
    idle_since = time.monotonic()
    while time.monotonic() < end:
        m = c.poll(0.2)
        if m is None:
            if len(out) >= want_total and time.monotonic() - idle_since > 1.0:
                break
            continue
        if m.error() is None:
            out.append((m.partition(), m.offset(), m.value().decode()))
            idle_since = time.monotonic()
    c.close()
    return out


def idempotent_phase(bootstrap, broker, rng, records):
    """An idempotent producer under two broker kills: each acknowledged record once."""
    p = Producer(conf(bootstrap, **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000,
                                    "retry.backoff.ms": 50}))
    acked, failed = set(), []

    def done(err, msg):
        if err is None:
            acked.add(msg.value().decode())
        else:
            failed.append(str(err))

    kills = sorted(rng.sample(range(records // 10, records - records // 10), 2))
    for i in range(records):
        if kills and i == kills[0]:
            kills.pop(0)
            p.flush(0.2)
            broker.kill_and_restart(rng.uniform(0.1, 0.8))
        while True:
            try:
                p.produce("idem", f"i{i}".encode(), key=f"k{i % 97}".encode(), on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(60)
    got = read_all(bootstrap, "idem", "read_uncommitted", len(acked))
    values = [v for _, _, v in got]
    dups = len(values) - len(set(values))
    lost = len(acked - set(values))
    print(f"idempotent producer: {records} sent, {len(acked)} acknowledged, {len(failed)} failed, {left} unflushed, "
          f"{len(values)} stored, duplicates {dups}, acknowledged but lost {lost}, broker kills 2")
    problems = []
    if dups:
        problems.append(f"{dups} duplicates")
    if lost:
        problems.append(f"{lost} acknowledged records lost")
    return problems


def worker(bootstrap, name):
    """One pipeline member: read_committed input, transactional output, offsets in the transaction."""
    c = Consumer(conf(bootstrap, **{"group.id": "eos", "enable.auto.commit": False, "isolation.level": "read_committed",
                                    "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                    "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000,
                                    # Static members (KIP-345): a restarted worker gets its
                                    # partitions back at once and fences the one it replaces.
                                    "group.instance.id": name,
                                    "partition.assignment.strategy": "range"}))
    p = Producer(conf(bootstrap, **{"transactional.id": f"eos-{name}", "transaction.timeout.ms": 10000,
                                    "linger.ms": 2}))
    p.init_transactions(30)
    c.subscribe(["in"])
    while True:
        msgs = [m for m in c.consume(200, 0.2) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce("out", b"out-" + m.value(), key=m.key(), partition=m.partition())
        # "Processing": the transaction stays open a while, stored but not
        # committed, so kills land inside transactions.
        p.flush(30)
        time.sleep(0.2)
        offsets = {}
        for m in msgs:
            offsets[m.partition()] = max(offsets.get(m.partition(), -1), m.offset() + 1)
        p.send_offsets_to_transaction([TopicPartition("in", part, o) for part, o in offsets.items()],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)


def committed_offsets(bootstrap):
    c = Consumer(conf(bootstrap, **{"group.id": "eos", "enable.auto.commit": False}))
    got = c.committed([TopicPartition("in", p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    return {t.partition: t.offset for t in got}


def pipeline_phase(bootstrap, broker, rng, records, deadline_s, workdir):
    # The input arrives over most of the chaos window (an idempotent producer
    # in a thread), so the workers process it while members and the broker die.
    chaos_s = deadline_s * 0.5
    fed = {"acked": 0, "failed": 0}

    def feed():
        p = Producer(conf(bootstrap, **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000}))

        def done(err, _msg):
            fed["failed" if err else "acked"] += 1

        pace = chaos_s * 0.8 / records
        t0 = time.monotonic()
        for i in range(records):
            while time.monotonic() < t0 + i * pace:
                p.poll(0.005)
            p.produce("in", f"{i}".encode(), key=f"k{i % 101}".encode(), partition=i % PARTITIONS, on_delivery=done)
        p.flush(60)

    import threading
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    logs = open(os.path.join(workdir, "workers.log"), "w")
    me = os.path.abspath(__file__)

    def spawn(name):
        return subprocess.Popen([sys.executable, me, "--worker", name, "--bootstrap", bootstrap],
                                stdout=logs, stderr=logs)

    workers = {n: spawn(n) for n in ("a", "b")}
    worker_kills = restarts = 0
    start = time.monotonic()
    chaos_until = start + chaos_s
    next_chaos = start + rng.uniform(1.0, 2.5)
    done = False
    while time.monotonic() < start + deadline_s:
        time.sleep(0.1)
        now = time.monotonic()
        for n, proc in list(workers.items()):
            if proc.poll() is not None:  # a worker that failed (fenced, broker gone): a new process
                workers[n] = spawn(n)
                restarts += 1
        if now < chaos_until and now >= next_chaos:
            if rng.random() < 0.35:
                broker.kill_and_restart(rng.uniform(0.1, 0.6))
            else:
                n = rng.choice(sorted(workers))
                workers[n].send_signal(signal.SIGKILL)
                workers[n].wait()
                worker_kills += 1
                workers[n] = spawn(n)
            next_chaos = now + rng.uniform(1.0, 3.0)
        if now >= chaos_until:
            try:
                committed = committed_offsets(bootstrap)
            except KafkaException:
                continue
            if sum(max(o, 0) for o in committed.values()) >= records:
                done = True
                break
    for proc in workers.values():
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    feeder.join(60)
    if fed["acked"] != records:
        print(f"the input producer: {fed['acked']} acknowledged, {fed['failed']} failed")
    committed = committed_offsets(bootstrap)
    out = read_all(bootstrap, "out", "read_committed", records)
    raw = read_all(bootstrap, "out", "read_uncommitted", records)
    values = [v for _, _, v in out]
    want = {f"out-{i}" for i in range(records)}
    dups = len(values) - len(set(values))
    lost = len(want - set(values))
    extra = len(set(values) - want)
    print(f"pipeline: {records} in, {len(values)} out (read_committed), duplicates {dups}, lost {lost}, unexpected {extra}; "
          f"committed offsets {committed} ({'all consumed' if done else 'NOT all consumed'}); "
          f"worker kills {worker_kills}, worker restarts after failures {restarts}, broker kills {broker.kills}; "
          f"records of aborted transactions in the log {len(raw) - len(out)}")
    problems = []
    if not done:
        problems.append(f"the pipeline did not consume every input record within {deadline_s} s")
    if dups:
        problems.append(f"{dups} duplicates in the output")
    if lost:
        problems.append(f"{lost} input records missing from the output")
    if extra:
        problems.append(f"{extra} unexpected output records")
    if any(o > records for o in committed.values()):
        problems.append(f"committed offsets past the input: {committed}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("flume", nargs="?")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "7")))
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--deadline", type=float, default=60.0)
    ap.add_argument("--worker")
    ap.add_argument("--bootstrap")
    a = ap.parse_args()
    if a.worker:
        worker(a.bootstrap, a.worker)
        return 0
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="flume-chaos.")
    log = open(os.path.join(work, "broker.log"), "w")
    kport = free_port()
    broker = Broker(a.flume, os.path.join(work, "data"), free_port(), kport, log)
    broker.start()
    bootstrap = f"127.0.0.1:{kport}"
    print(f"seed {a.seed}; logs in {work}")
    problems = []
    try:
        admin = AdminClient(conf(bootstrap))
        for t in ("idem", "in", "out"):
            for f in admin.create_topics([NewTopic(t, PARTITIONS, 1)]).values():
                f.result(15)
        t0 = time.monotonic()
        problems += [f"idempotence: {p}" for p in idempotent_phase(bootstrap, broker, rng, a.records)]
        t1 = time.monotonic()
        problems += [f"pipeline: {p}" for p in pipeline_phase(bootstrap, broker, rng, a.records, a.deadline, work)]
        print(f"took {t1 - t0:.1f} s and {time.monotonic() - t1:.1f} s")
    finally:
        broker.stop()
    for p in problems:
        print(f"FAIL {p}")
    if not problems:
        print("PASS exactly-once under broker and member kills")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
