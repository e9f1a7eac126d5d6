#!/usr/bin/env python3
"""Share groups (KIP-932, issue #44) with confluent-kafka's ShareConsumer (librdkafka's share
consumer, a preview in 2.16), explicit acknowledgement, against a Kafka-protocol broker.

    python share_test.py --flume FLUME_CLI --prefix PREFIX --logdir DIR  # starts its own brokers
    python share_test.py --bootstrap HOST:PORT --prefix PREFIX --logdir DIR  # a running broker
    python share_test.py ... --no-preflight   # run even if the broker advertises no share APIs

The lock duration, the delivery-count limit and `share.auto.offset.reset` are group configs
(a share consumer cannot set them). They are set per group through IncrementalAlterConfigs
on a GROUP resource (Kafka's names: share.record.lock.duration.ms, share.delivery.count.limit,
share.auto.offset.reset) when the broker takes them; otherwise (with --flume) through broker
flags on brokers of their own: --share-record-lock-duration-ms 2000 --share-delivery-count-limit 3
on one, --share-auto-offset-reset earliest on another. The first line on stderr says which.

Scenarios (one PASS/FAIL line each, as common.Reporter prints them):
  three-consumers            3 consumers, 1 partition, 3,000 records: each accepted exactly once
  release-every-tenth        every tenth record released once: back with delivery count 2, then accepted
  lock-expiry                a consumer that stops polling: its records back after the lock, count 2
  close-unacknowledged       a consumer that closes without acknowledging: its records back, count 2
  reject-and-delivery-limit  a rejected record never comes back; one always released is archived at 3
  auto-offset-reset          a new group starts at the log end; with earliest it gets the older records
Every wait is a condition with a deadline (common.DEADLINE_S); consumers are closed at the end.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import confluent_test  # noqa: E402
import probe  # noqa: E402

CLIENT = "share"
LOCK_MS = 2000  # the lock duration of the lock-expiry, close and reject scenarios
DELIVERY_LIMIT = 3
# A lock timer may fire a little early (timer granularity); a record back sooner than this
# after its acquisition did not wait for its lock.
LOCK_SLACK_S = 0.3
SCENARIOS = [
    "three-consumers",
    "release-every-tenth",
    "lock-expiry",
    "close-unacknowledged",
    "reject-and-delivery-limit",
    "auto-offset-reset",
]
# API keys the share consumer needs, all at v1 (librdkafka asks for exactly v1).
SHARE_APIS = {76: "ShareGroupHeartbeat", 78: "ShareFetch", 79: "ShareAcknowledge"}
FLAGS = ["--share-record-lock-duration-ms", "--share-delivery-count-limit", "--share-auto-offset-reset"]

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
TYPE_NAME = {ACCEPT: "accept", RELEASE: "release", REJECT: "reject"}


def share_conf(bootstrap, group, **extra):
    c = dict(confluent_test.BASE)
    c.update(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 100,  # small batches: several consumers get a turn
            "fetch.wait.max.ms": 200,
        }
    )
    c.update(extra)
    return c


# ---------------------------------------------------------------------------
# Brokers of our own (with --flume): free ports, a temp dir, stopped at exit.


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


BROKERS = []


def flume_cmd(flume):
    """flume-cli, or a stand-in script (mock_share_broker.py) run with this Python."""
    return [sys.executable, flume] if flume.endswith(".py") else [flume]


class Broker:
    def __init__(self, flume, workdir, name, extra):
        self.name = name
        self.data = os.path.join(workdir, name)
        os.makedirs(self.data, exist_ok=True)
        self.port, self.kport = free_port(), free_port()
        while self.kport == self.port:
            self.kport = free_port()
        self.logpath = os.path.join(workdir, f"{name}.log")
        self.log = open(self.logpath, "w")
        args = flume_cmd(flume) + ["broker", "--host", "127.0.0.1", "--port", str(self.port), "--kafka-port", str(self.kport),
                "--data", self.data] + extra
        common.log(f"[share] starting broker {name}: {' '.join(args)}")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        BROKERS.append(self)
        end = time.monotonic() + 20
        while not port_open(self.kport):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {name} exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > end:
                raise RuntimeError(f"broker {name}: Kafka port {self.kport} did not open within 20s")
            time.sleep(0.05)
        self.bootstrap = f"127.0.0.1:{self.kport}"

    def tail(self):
        self.log.flush()
        with open(self.logpath) as f:
            return " | ".join(f.read().splitlines()[-3:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def stop_brokers():
    for b in BROKERS:
        b.stop()


# ---------------------------------------------------------------------------
# Share-group setup: group configs through the admin API, or broker flags.


def set_group_configs(bootstrap, group, configs):
    """IncrementalAlterConfigs SET on the GROUP resource `group`; raises on refusal."""
    admin = AdminClient(confluent_test.conf(bootstrap))
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()],
    )
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)


class Setup:
    """Where each kind of scenario runs and how its group gets its configs.

    plain: a broker with default share settings. limited(group): bootstrap of a broker on which
    `group` has the short lock and the delivery limit. earliest(group): bootstrap of a broker
    on which `group` starts at the earliest offset."""

    def __init__(self, args):
        self.flume = args.flume
        self.workdir = args.logdir
        self.mode = None
        self.error = None
        self._limited = self._earliest = None
        if args.bootstrap:
            self.plain = args.bootstrap
        else:
            self.plain = Broker(args.flume, args.logdir, "share-broker", []).bootstrap
        try:
            set_group_configs(self.plain, f"{args.prefix}-probe", {"share.record.lock.duration.ms": LOCK_MS})
            self.mode = "group-configs"
        except Exception as e:
            refused = f"{type(e).__name__}: {e}"
            if not self.flume:
                self.error = f"the broker refuses share group configs ({refused}) and no --flume to start one with flags"
                return
            help_text = subprocess.run(flume_cmd(self.flume) + ["broker", "--help"], capture_output=True,
                                       text=True, timeout=30).stdout
            missing = [f for f in FLAGS if f not in help_text]
            if missing:
                self.error = (f"the broker refuses share group configs through IncrementalAlterConfigs ({refused}) "
                              f"and `flume-cli broker` has no {', '.join(missing)}")
                return
            self.mode = "broker-flags"
        common.log(f"[share] group settings through {self.mode}")

    def limited(self, group):
        if self.error:
            raise RuntimeError(self.error)
        if self.mode == "group-configs":
            set_group_configs(self.plain, group, {"share.record.lock.duration.ms": LOCK_MS,
                                                  "share.delivery.count.limit": DELIVERY_LIMIT})
            return self.plain
        if self._limited is None:
            self._limited = Broker(self.flume, self.workdir, "share-broker-limited",
                                   [FLAGS[0], str(LOCK_MS), FLAGS[1], str(DELIVERY_LIMIT)]).bootstrap
        return self._limited

    def earliest(self, group):
        if self.error:
            raise RuntimeError(self.error)
        if self.mode == "group-configs":
            set_group_configs(self.plain, group, {"share.auto.offset.reset": "earliest"})
            return self.plain
        if self._earliest is None:
            self._earliest = Broker(self.flume, self.workdir, "share-broker-earliest", [FLAGS[2], "earliest"]).bootstrap
        return self._earliest


# ---------------------------------------------------------------------------
# A share consumer driven by a decision per record.


class Member:
    """One ShareConsumer in explicit mode. `decide(value, delivery_count)` gives the
    acknowledgement type of each record, or None to hold it (the member then stops polling,
    keeping the records acquired). Every acknowledgement is committed with commit_sync and its
    per-partition result kept: only an acknowledgement the broker confirmed counts."""

    def __init__(self, name, bootstrap, group, topic, decide, **extra):
        self.name, self.topic, self.decide = name, topic, decide
        self.consumer = ShareConsumer(share_conf(bootstrap, group, **extra))
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.deliveries = []  # (value, delivery_count, monotonic time of the poll that returned it)
        self.acks = []  # (value, ack type, ok, monotonic time of the commit's answer)
        self.errors = []
        self.held = []  # records left unacknowledged (decide gave None)
        self.held_at = None
        self.closed = False

    def step(self, timeout=0.2):
        """One poll; acknowledge and commit what came. Returns False once holding records."""
        if self.held:
            return False
        batch = self.consumer.poll(timeout)
        now = time.monotonic()
        pending = []
        for m in batch:
            if m.error() is not None:
                with self.lock:
                    self.errors.append(str(m.error()))
                continue
            value = m.value().decode()
            dc = m.delivery_count()
            with self.lock:
                self.deliveries.append((value, dc, now))
            t = self.decide(value, dc)
            if t is None:
                with self.lock:
                    self.held.append(value)
                continue
            self.consumer.acknowledge(m, t)
            pending.append((value, t, m.partition()))
        if self.held:
            with self.lock:
                self.held_at = now
        if pending:
            results = self.consumer.commit_sync(common.DEADLINE_S)
            by_partition = {(tp.topic, tp.partition): exc for tp, exc in results.items()}
            done = time.monotonic()
            with self.lock:
                for value, t, p in pending:
                    key = (self.topic, p)
                    exc = by_partition.get(key, "no result for the partition")
                    ok = exc is None
                    if not ok:
                        self.errors.append(f"{TYPE_NAME[t]} of {value} failed: {exc}")
                    self.acks.append((value, t, ok, done))
        return not self.held

    def snapshot(self):
        with self.lock:
            return list(self.deliveries), list(self.acks), list(self.errors)

    def close(self):
        if not self.closed:
            self.closed = True
            self.consumer.close()


class Crew:
    """Members polled each in its own thread until stopped (or holding records)."""

    def __init__(self, members):
        self.members = list(members)
        self.stop_evt = threading.Event()
        self.failures = []
        self.threads = []
        for m in self.members:
            self.start(m)

    def start(self, m):
        if m not in self.members:
            self.members.append(m)

        def loop():
            try:
                while not self.stop_evt.is_set() and m.step():
                    pass
            except Exception as e:  # a client error ends this member's loop and fails the scenario
                common.log(traceback.format_exc())
                self.failures.append(f"{m.name}: {type(e).__name__}: {e}")

        t = threading.Thread(target=loop, daemon=True, name=m.name)
        t.start()
        self.threads.append(t)

    def stop_and_close(self):
        """Stops every loop, then closes every member; returns problems."""
        self.stop_evt.set()
        problems = []
        for m in self.members:
            d, a, e = m.snapshot()
            common.log(f"[share] {m.name}: {len(d)} deliveries, {sum(1 for x in a if x[2])} of {len(a)} "
                       f"acknowledgements confirmed, {len(e)} errors {e[:3]}")
        for t in self.threads:
            t.join(common.DEADLINE_S)
            if t.is_alive():
                problems.append(f"{t.name} still in a poll/commit {common.DEADLINE_S:.0f}s after the stop")
        for m in self.members:
            try:
                m.close()
            except KafkaException as e:
                problems.append(f"{m.name}: close: {e}")
        return problems + self.failures


def accepted_ok(members):
    """value -> number of accepts the broker confirmed, over all members."""
    out = {}
    for m in members:
        for value, t, ok, _ in m.snapshot()[1]:
            if ok and t == ACCEPT:
                out[value] = out.get(value, 0) + 1
    return out


def deliveries_of(members):
    """value -> [(delivery_count, time, member name)] in time order."""
    out = {}
    for m in members:
        for value, dc, at in m.snapshot()[0]:
            out.setdefault(value, []).append((dc, at, m.name))
    for v in out.values():
        v.sort(key=lambda d: d[1])
    return out


def wait(crew, cond, what, deadline_s=None):
    """Waits for cond() while the crew polls; a member thread that died ends the wait."""
    deadline_s = deadline_s or common.DEADLINE_S

    def check():
        if crew.failures:
            raise RuntimeError(f"while waiting for {what}: {crew.failures[0]}")
        return cond()

    common.wait_for(check, deadline_s, what)


def create_topic(bootstrap, topic):
    confluent_test.create_topic(bootstrap, topic, 1)


def producer(bootstrap):
    return Producer(confluent_test.conf(bootstrap, **{"linger.ms": 5}))


def produce(p, topic, values):
    errors = []

    def done(err, _msg):
        if err is not None:
            errors.append(str(err))

    for v in values:
        while True:
            try:
                p.produce(topic, v.encode(), partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(common.DEADLINE_S)
    if left or errors:
        raise RuntimeError(f"producing to {topic}: {left} not delivered, errors {errors[:3]}")


def warm_up(crew, p, topic, members, tag, every=True):
    """A new group starts at the log end when its share-partition is first fetched
    (share.auto.offset.reset latest). Produces warm-up records, one every 0.3 s, until each of
    `members` (every=False: one of them) received one: from then on every record produced
    reaches the group."""
    prefix = f"{topic}-{tag}-warm-"

    def waiting():
        w = [m for m in members if not any(v.startswith(prefix) for v, _, _ in m.snapshot()[0])]
        return w if every or len(w) == len(members) else []

    k = 0
    end = time.monotonic() + common.DEADLINE_S
    while waiting():
        if crew.failures:
            raise RuntimeError(f"during the warm-up: {crew.failures[0]}")
        if time.monotonic() > end:
            names = [m.name for m in waiting()]
            raise TimeoutError(f"no warm-up record reached {names} within {common.DEADLINE_S:.0f}s "
                               f"({k} produced; errors: {[e for m in members for e in m.snapshot()[2]][:3]})")
        produce(p, topic, [f"{prefix}{k}"])
        k += 1
        # The next one in 0.3 s, or at once when a member got this one.
        before = len(waiting())
        step_end = time.monotonic() + 0.3
        while time.monotonic() < step_end and len(waiting()) == before:
            time.sleep(0.02)
    return k


def is_warm(value):
    return "-warm-" in value


def accept_all(_value, _dc):
    return ACCEPT


def exactly_once(values, members, problems):
    """Every value accepted exactly once (confirmed by the broker); no record delivered again
    after an accept of it was confirmed."""
    acc = accepted_ok(members)
    missing = [v for v in values if acc.get(v, 0) == 0]
    twice = [v for v in values if acc.get(v, 0) > 1]
    if missing:
        problems.append(f"{len(missing)} of {len(values)} records never accepted (e.g. {missing[0]})")
    if twice:
        problems.append(f"{len(twice)} records accepted more than once (e.g. {twice[0]})")
    ok_at = {}
    for m in members:
        for value, t, ok, at in m.snapshot()[1]:
            if ok and t in (ACCEPT, REJECT):
                ok_at[value] = min(at, ok_at.get(value, at))
    again = [v for v, ds in deliveries_of(members).items() if v in ok_at and any(at > ok_at[v] for _, at, _ in ds)]
    if again:
        problems.append(f"{len(again)} records delivered again after their accept/reject was confirmed (e.g. {again[0]})")
    return acc


def counts_rising(ds):
    """Delivery counts of one record's deliveries, in time order, must rise."""
    cs = [dc for dc, _, _ in ds]
    return all(b > a for a, b in zip(cs, cs[1:]))


# ---------------------------------------------------------------------------
# Scenarios


def scenario_three_consumers(setup, pre):
    topic, group, n = f"{pre}-three", f"{pre}-three-g", 3000
    bootstrap = setup.plain
    create_topic(bootstrap, topic)
    members = [Member(f"c{i}", bootstrap, group, topic, accept_all) for i in range(3)]
    crew = Crew(members)
    p = producer(bootstrap)
    problems = []
    values = [f"{topic}-{i}" for i in range(n)]
    try:
        warm_up(crew, p, topic, members, "a")
        produce(p, topic, values)
        wait(crew, lambda: all(v in accepted_ok(members) for v in values), f"{n} records accepted",
             2 * common.DEADLINE_S)
    finally:
        problems += crew.stop_and_close()
    acc = exactly_once(values, members, problems)
    want = set(values)
    per = [sum(1 for v, _, _ in m.snapshot()[0] if v in want) for m in members]
    ds = deliveries_of(members)
    redelivered = [v for v in values if len(ds.get(v, [])) > 1]
    bad = [v for v in redelivered if not counts_rising(ds[v])]
    if bad:
        problems.append(f"{len(bad)} records delivered again without a higher delivery count (e.g. {bad[0]}: {ds[bad[0]]})")
    first_counts = {ds[v][0][0] for v in values if v in ds}
    if first_counts - {1}:
        problems.append(f"first deliveries with delivery counts {sorted(first_counts)}, expected 1")
    if sum(1 for c in per if c) < 2:
        problems.append(f"only one consumer got records of the {n}: per consumer {per}")
    unexpected = [v for m in members for v, _, _ in m.snapshot()[0] if v not in want and not is_warm(v)]
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected records (e.g. {unexpected[0]})")
    errors = [e for m in members for e in m.snapshot()[2]]
    common.log(f"[share] three-consumers: per consumer {per} of {n}, accepted {sum(1 for v in values if acc.get(v))}, "
               f"redelivered {len(redelivered)}, failed acknowledgements/errors {len(errors)} {errors[:3]}")
    return problems


def scenario_release_every_tenth(setup, pre):
    topic, group, n = f"{pre}-rel", f"{pre}-rel-g", 300
    bootstrap = setup.plain
    create_topic(bootstrap, topic)
    tenth = {f"{topic}-{i}" for i in range(0, n, 10)}

    def decide(value, dc):
        return RELEASE if value in tenth and dc == 1 else ACCEPT

    members = [Member(f"r{i}", bootstrap, group, topic, decide) for i in range(2)]
    crew = Crew(members)
    p = producer(bootstrap)
    problems = []
    values = [f"{topic}-{i}" for i in range(n)]
    try:
        warm_up(crew, p, topic, members, "b", every=False)
        produce(p, topic, values)
        wait(crew, lambda: all(v in accepted_ok(members) for v in values), f"{n} records accepted")
    finally:
        problems += crew.stop_and_close()
    exactly_once(values, members, problems)
    ds = deliveries_of(members)
    released = [v for m in members for v, t, ok, _ in m.snapshot()[1] if t == RELEASE and ok]
    if sorted(released) != sorted(tenth):
        problems.append(f"{len(released)} confirmed releases, expected one for each of the {len(tenth)} tenth records")
    back = [v for v in tenth if [dc for dc, _, _ in ds.get(v, [])] == [1, 2]]
    if len(back) != len(tenth):
        odd = [(v, ds.get(v)) for v in tenth if v not in back][:2]
        problems.append(f"{len(back)} of {len(tenth)} released records came back exactly once with delivery count 2 "
                        f"(e.g. {odd})")
    others = [v for v in values if v not in tenth and [dc for dc, _, _ in ds.get(v, [])] != [1]]
    if others:
        problems.append(f"{len(others)} records never released were not delivered exactly once with count 1 "
                        f"(e.g. {others[0]}: {ds.get(others[0])})")
    by = {}
    for v in tenth:
        for _, _, name in ds.get(v, [])[1:]:
            by[name] = by.get(name, 0) + 1
    common.log(f"[share] release-every-tenth: {len(released)} released, {len(back)} back with count 2 (to {by}), "
               f"{len(values)} accepted")
    return problems


def held_back(pre, setup, tag, close_first):
    """A consumer S takes a batch of the records and keeps it unacknowledged: it stops polling
    (close_first False: the records come back when the lock expires) or closes (True: they come
    back at the latest then). A second consumer B then accepts everything: the held records
    must reach it with delivery count 2 (not before the lock expired, if S still polls no
    more but is alive), the others with count 1."""
    topic, group, n = f"{pre}-{tag}", f"{pre}-{tag}-g", 20
    bootstrap = setup.limited(group)
    create_topic(bootstrap, topic)
    values = [f"{topic}-{i}" for i in range(n)]

    def hold(value, _dc):
        return ACCEPT if is_warm(value) else None

    s = Member("s", bootstrap, group, topic, hold)
    crew = Crew([s])
    p = producer(bootstrap)
    problems = []
    b = None
    try:
        warm_up(crew, p, topic, [s], tag)
        produce(p, topic, values)
        wait(crew, lambda: s.held_at is not None, "the first consumer to take a batch")
        held, held_at = list(s.held), s.held_at
        if close_first:
            s.close()  # without acknowledging the batch
        b = Member("b", bootstrap, group, topic, accept_all)
        crew.start(b)
        wait(crew, lambda: all(v in accepted_ok([b]) for v in values), f"the second consumer to accept all {n}",
             LOCK_MS / 1000 + common.DEADLINE_S)
    finally:
        problems += crew.stop_and_close()
    exactly_once(values, [s, b], problems)
    ds = deliveries_of([b])
    for v in values:
        got = ds.get(v, [])
        want = 2 if v in held else 1
        if [dc for dc, _, _ in got] != [want]:
            problems.append(f"{v} ({'held' if v in held else 'not held'}) reached the second consumer as "
                            f"{[dc for dc, _, _ in got]}, expected once with delivery count {want}")
            break
    early = [v for v in held if ds.get(v) and ds[v][0][1] - held_at < LOCK_MS / 1000 - LOCK_SLACK_S]
    if early and not close_first:
        d = ds[early[0]][0][1] - held_at
        problems.append(f"{len(early)} held records came back {d:.2f}s after they were acquired, before the "
                        f"{LOCK_MS} ms lock expired")
    back = [ds[v][0][1] - held_at for v in held if ds.get(v)]
    common.log(f"[share] {tag}: the first consumer held {len(held)} of {n}; back after "
               f"{min(back, default=0):.2f}-{max(back, default=0):.2f}s with delivery count 2; "
               f"{n - len(held)} others delivered once")
    return problems


def scenario_lock_expiry(setup, pre):
    return held_back(pre, setup, "lock", close_first=False)


def scenario_close_unacknowledged(setup, pre):
    return held_back(pre, setup, "close", close_first=True)


def scenario_reject_and_limit(setup, pre):
    topic, group, n = f"{pre}-rej", f"{pre}-rej-g", 10
    bootstrap = setup.limited(group)
    create_topic(bootstrap, topic)
    values = [f"{topic}-{i}" for i in range(n)]
    poison, flaky = values[3], values[6]
    marker = f"{topic}-after"

    def decide(value, _dc):
        return REJECT if value == poison else RELEASE if value == flaky else ACCEPT

    m = Member("p", bootstrap, group, topic, decide)
    crew = Crew([m])
    p = producer(bootstrap)
    problems = []
    plain = [v for v in values if v not in (poison, flaky)]
    try:
        warm_up(crew, p, topic, [m], "d")
        produce(p, topic, values)
        wait(crew, lambda: len(deliveries_of([m]).get(flaky, [])) >= DELIVERY_LIMIT
             and all(v in accepted_ok([m]) for v in plain), f"{len(plain)} records accepted and {flaky} "
             f"delivered {DELIVERY_LIMIT} times")
        # A record after them: once it is accepted the consumer has fetched past the archived
        # one; then one lock duration more, in which neither may come back.
        produce(p, topic, [marker])
        wait(crew, lambda: marker in accepted_ok([m]), "a record produced after them to be accepted")
        quiet_end = time.monotonic() + LOCK_MS / 1000 + 1
        wait(crew, lambda: time.monotonic() > quiet_end, "the quiet period", LOCK_MS / 1000 + 5)
    finally:
        problems += crew.stop_and_close()
    exactly_once(plain + [marker], [m], problems)
    ds = deliveries_of([m])
    pc = [dc for dc, _, _ in ds.get(poison, [])]
    fc = [dc for dc, _, _ in ds.get(flaky, [])]
    if pc != [1]:
        problems.append(f"the rejected record was delivered with counts {pc}, expected once (count 1)")
    if fc != list(range(1, DELIVERY_LIMIT + 1)):
        problems.append(f"the always-released record was delivered with counts {fc}, expected "
                        f"{list(range(1, DELIVERY_LIMIT + 1))} and then archived")
    acks = m.snapshot()[1]
    if not any(v == poison and t == REJECT and ok for v, t, ok, _ in acks):
        problems.append("the reject of the poison record was not confirmed")
    common.log(f"[share] reject-and-delivery-limit: poison delivered {pc}, flaky delivered {fc}, "
               f"{len(plain)} + marker accepted")
    return problems


def scenario_auto_offset_reset(setup, pre):
    problems = []
    # Default (latest): records older than the group's first fetch are not delivered.
    topic, group = f"{pre}-reset", f"{pre}-reset-latest"
    bootstrap = setup.plain
    create_topic(bootstrap, topic)
    p = producer(bootstrap)
    old = [f"{topic}-old-{i}" for i in range(5)]
    new = [f"{topic}-new-{i}" for i in range(5)]
    produce(p, topic, old)
    m = Member("latest", bootstrap, group, topic, accept_all)
    crew = Crew([m])
    try:
        warm_up(crew, p, topic, [m], "e")
        produce(p, topic, new)
        wait(crew, lambda: all(v in accepted_ok([m]) for v in new), "the new records accepted")
    finally:
        problems += crew.stop_and_close()
    seen = [v for v, _, _ in m.snapshot()[0]]
    got_old = [v for v in seen if v in old]
    if got_old:
        problems.append(f"a new group (latest) got {len(got_old)} records produced before its first fetch")
    # Earliest: a new group gets them.
    group2 = f"{pre}-reset-earliest"
    bootstrap2 = setup.earliest(group2)
    if bootstrap2 != bootstrap:
        create_topic(bootstrap2, topic)
        produce(producer(bootstrap2), topic, old + new)
    e = Member("earliest", bootstrap2, group2, topic, accept_all)
    crew = Crew([e])
    try:
        wait(crew, lambda: all(v in accepted_ok([e]) for v in old + new), "the older records to reach the earliest group")
    finally:
        problems += crew.stop_and_close()
    exactly_once(old + new, [e], problems)
    common.log(f"[share] auto-offset-reset: latest got {len(seen)} records ({len(got_old)} old), "
               f"earliest got {len(e.snapshot()[0])} ({sum(1 for v, _, _ in e.snapshot()[0] if v in old)} old)")
    return problems


RUNS = {
    "three-consumers": (scenario_three_consumers, 3),
    "release-every-tenth": (scenario_release_every_tenth, 2),
    "lock-expiry": (scenario_lock_expiry, 2),
    "close-unacknowledged": (scenario_close_unacknowledged, 2),
    "reject-and-delivery-limit": (scenario_reject_and_limit, 2),
    "auto-offset-reset": (scenario_auto_offset_reset, 3),
}


def preflight(bootstrap):
    """None if the broker advertises the share APIs at v1, else why not."""
    try:
        apis = {k: (lo, hi) for k, lo, hi in probe.probe(bootstrap, 10)}
    except (OSError, ValueError) as e:
        return f"{bootstrap} does not answer ApiVersions: {type(e).__name__}: {e}"
    missing = [f"{name} ({k})" for k, name in SHARE_APIS.items() if not (k in apis and apis[k][0] <= 1 <= apis[k][1])]
    if missing:
        return f"the broker at {bootstrap} does not advertise {', '.join(missing)} at v1, which librdkafka requires"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--flume", help="flume-cli: start brokers of our own")
    where.add_argument("--bootstrap", help="a running Kafka-protocol broker (group configs needed)")
    ap.add_argument("--prefix", default=f"kc{int(time.time())}{os.getpid()}")
    ap.add_argument("--logdir", default=None)
    ap.add_argument("--no-preflight", action="store_true", help="run even without the share APIs advertised")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    args = ap.parse_args()
    if args.logdir is None:
        args.logdir = tempfile.mkdtemp(prefix="flume-share-")
    os.makedirs(args.logdir, exist_ok=True)
    pre = f"{args.prefix}-sh"
    rep = common.Reporter(CLIENT)
    names = [s for s in args.only.split(",") if s] or SCENARIOS
    unknown = [s for s in names if s not in RUNS]
    if unknown:
        ap.error(f"unknown scenarios {unknown} (known: {', '.join(SCENARIOS)})")
    try:
        try:
            setup = Setup(args)
        except Exception as e:
            common.log(traceback.format_exc())
            why = f"setup failed: {type(e).__name__}: {e}"
            for name in names:
                rep.run(name, lambda w=why: [w])
            return
        why = None if args.no_preflight else preflight(setup.plain)
        for name in names:
            fn, factor = RUNS[name]
            if why:
                rep.run(name, lambda w=why: [f"not run: {w}"])
            else:
                rep.run(name, fn, setup, pre, timeout=factor * common.DEADLINE_S + 30)
    finally:
        stop_brokers()
        rep.finish()


if __name__ == "__main__":
    sys.exit(main())
