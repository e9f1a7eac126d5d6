#!/usr/bin/env python3
"""Flume's SDK in a consumer group on a Kafka cluster nobody here wrote: librdkafka's mock
cluster with three brokers, as the confluent-kafka wheel builds it (`test.mock.num.brokers`),
which many teams use for their own tests (issue 41). Its coordinator advertises JoinGroup
v0-6 and SyncGroup v0-4 but misreads v6 and v4 (their first flexible versions) and closes
the connection: an SDK member that joined at v6 never got into the group.

    mock_group.py FLUME_CLI LOGDIR

Scenario `mock-group`: a topic of 4 partitions (the mock creates it on first use);
two `flume-cli consume --broker kafka://<the 3 brokers> --group G` members and a
confluent_kafka Consumer (range) in the same group. Once the three hold disjoint, non-empty
shares of partitions 0..3 (the SDK members' shares from their debug log lines "joined
group", the librdkafka member's from its assignment callback), 600 records are produced;
together the three must read each exactly once, each reading some (records read again
by the librdkafka member after the SDK members left are at-least-once, logged). Then both flume-cli
members get SIGINT and must exit with status 0 within 2 s (the last commit and the leave
included); the librdkafka member then takes every partition, and closes.

Output: `PASS|FAIL confluent-mock mock-group (time)` on stdout; logs in LOGDIR.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, Producer

import common

CLIENT = "confluent-mock"
RECORDS = 600
PARTITIONS = 4
JOINED = re.compile(r"joined group .*generation=(\d+).*assignment=\[(.*)\]")


class CliMember:
    """A `flume-cli consume --group` process: records from its JSON lines on stdout, its
    share from the last "joined group" line of its debug log."""

    def __init__(self, cli, name, bootstrap, topic, group, logdir):
        self.name = name
        self.log_path = os.path.join(logdir, f"{CLIENT}-{name}.log")
        self.records = []
        self.lock = threading.Lock()
        env = dict(os.environ, RUST_LOG="warn,flume_client::kafka::group=debug")
        self.proc = subprocess.Popen(
            [cli, "consume", "--broker", f"kafka://{bootstrap}", "--topic", topic, "--group", group,
             "--format", "json", "--session-timeout-ms", "6000"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(self.log_path, "w"),
            text=True, env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                r = json.loads(line)
            except ValueError:
                common.log(f"[{self.name}] {line.rstrip()}")
                continue
            with self.lock:
                self.records.append((r["partition"], r["offset"], r["value"]))

    def read(self):
        with self.lock:
            return list(self.records)

    def share(self):
        """(generation, partitions) of its last join, or None."""
        with open(self.log_path, errors="replace") as f:
            joins = [m for m in map(JOINED.search, f) if m]
        if not joins:
            return None
        last = joins[-1]
        return int(last.group(1)), sorted(int(p) for p in re.findall(r", (\d+)\)", last.group(2)))

    def interrupt(self, limit):
        """SIGINT; None if it exited with status 0 within `limit` seconds, else a problem."""
        self.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            code = self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"{self.name} still running {limit}s after SIGINT (killed)"
        took = time.monotonic() - sent
        self.reader.join(2)
        common.log(f"{self.name}: exited {took * 1000:.0f} ms after SIGINT, status {code}")
        if code != 0:
            return f"{self.name} exited with status {code} after SIGINT (log {self.log_path})"
        return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class RdMember:
    """A confluent_kafka Consumer polled in a thread: its assignment and the records it
    read, each committed before the next poll."""

    def __init__(self, bootstrap, topic, group):
        self.assignment = []
        self.records = []
        self.errors = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "partition.assignment.strategy": "range",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "log_level": 3,
        })
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, _consumer, parts):
        with self.lock:
            self.assignment = sorted(p.partition for p in parts)

    def _revoked(self, _consumer, _parts):
        with self.lock:
            self.assignment = []

    def _run(self):
        while not self.stop.is_set():
            m = self.consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                with self.lock:
                    self.errors.append(str(m.error()))
                continue
            with self.lock:
                self.records.append((m.partition(), m.offset(), m.value().decode()))
            self.consumer.commit(message=m, asynchronous=False)
        self.consumer.close()

    def share(self):
        with self.lock:
            return list(self.assignment)

    def read(self):
        with self.lock:
            return list(self.records)

    def close(self, limit):
        self.stop.set()
        self.thread.join(limit)
        return None if not self.thread.is_alive() else f"the librdkafka member did not close within {limit}s"


def scenario(cli, logdir):
    problems = []
    mock = Producer({"test.mock.num.brokers": 3, "bootstrap.servers": "", "log_level": 3,
                     "linger.ms": 5})
    md = mock.list_topics(timeout=10)
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())
    if len(md.brokers) != 3:
        return [f"the mock cluster has {len(md.brokers)} brokers, not 3"]
    topic, group = f"mock-grp-{os.getpid()}", f"mock-g-{os.getpid()}"
    # The mock creates the topic (4 partitions) when its metadata is asked for.
    parts = common.wait_for(
        lambda: len(mock.list_topics(topic, timeout=5).topics[topic].partitions), common.DEADLINE_S,
        f"the mock to create {topic}")
    if parts != PARTITIONS:
        return [f"{topic} has {parts} partitions, not {PARTITIONS}"]
    common.log(f"mock cluster {bootstrap}, topic {topic}, group {group}")
    sdk = [CliMember(cli, f"sdk{i}", bootstrap, topic, group, logdir) for i in range(2)]
    rd = RdMember(bootstrap, topic, group)
    try:
        def formed():
            shares = [m.share() for m in sdk]
            if any(s is None or not s[1] for s in shares) or shares[0][0] != shares[1][0]:
                return None
            mine = rd.share()
            seen = shares[0][1] + shares[1][1] + mine
            if mine and sorted(seen) == list(range(PARTITIONS)):
                return shares, mine
            return None

        try:
            shares, mine = common.wait_for(formed, 3 * common.DEADLINE_S,
                                           "three members sharing partitions 0..3")
        except TimeoutError as e:
            return [f"{e}: SDK members {[m.share() for m in sdk]} (logs {sdk[0].log_path}), "
                    f"librdkafka member {rd.share()}"]
        common.log(f"group formed: SDK {shares}, librdkafka {mine}")
        values = [f"r{i}" for i in range(RECORDS)]
        for i, v in enumerate(values):
            mock.produce(topic, v.encode(), partition=i % PARTITIONS)
        left = mock.flush(common.DEADLINE_S)
        if left:
            return [f"{left} records not delivered to the mock"]

        def everything():
            return sum(len(m.read()) for m in sdk) + len(rd.read()) >= RECORDS

        try:
            common.wait_for(everything, 2 * common.DEADLINE_S, f"the group to read {RECORDS} records")
        except TimeoutError as e:
            problems.append(str(e))
        # What the group of three read: each record once.
        reads = {m.name: m.read() for m in sdk}
        reads["librdkafka"] = rd.read()
        for m in sdk:
            p = m.interrupt(2)
            if p:
                problems.append(p)
        # Their leave hands their partitions to the librdkafka member (at their commits).
        try:
            common.wait_for(lambda: rd.share() == list(range(PARTITIONS)), common.DEADLINE_S,
                            "the librdkafka member to take every partition")
        except TimeoutError as e:
            problems.append(f"{e}: assignment {rd.share()}")
        p = rd.close(common.DEADLINE_S)
        if p:
            problems.append(p)
        # After the SDK members left, what they read but had not committed yet (a commit
        # refused while the first leave rebalances the group) is read again: at-least-once.
        common.log(f"read again by the librdkafka member after the handover: "
                   f"{len(rd.read()) - len(reads['librdkafka'])}")
        common.log("records per member: " + ", ".join(f"{n} {len(rs)}" for n, rs in reads.items()))
        counts = {}
        for name, rs in reads.items():
            if not rs:
                problems.append(f"{name} read no record")
            for _p, _o, v in rs:
                counts[v] = counts.get(v, 0) + 1
        twice = sorted(v for v, n in counts.items() if n > 1)
        missing = [v for v in values if v not in counts]
        if twice:
            problems.append(f"{len(twice)} records read more than once ({twice[:3]})")
        if missing:
            problems.append(f"{len(missing)} records never read ({missing[:3]})")
        if rd.errors:
            problems.append(f"librdkafka member errors: {rd.errors[:3]}")
    finally:
        for m in sdk:
            m.kill()
    return problems


def main():
    cli, logdir = sys.argv[1:3]
    rep = common.Reporter(CLIENT)
    rep.run("mock-group", scenario, cli, logdir, timeout=7 * common.DEADLINE_S)
    rep.finish()


if __name__ == "__main__":
    sys.exit(main())
