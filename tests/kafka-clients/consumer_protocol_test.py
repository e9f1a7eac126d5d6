#!/usr/bin/env python3
"""Consumer-protocol groups (KIP-848, `group.protocol=consumer`) with confluent-kafka's
Consumer against a Kafka-protocol broker: the broker assigns the partitions (uniform
assignor) and moves them member by member.

    python consumer_protocol_test.py --flume FLUME_CLI --prefix PREFIX --logdir DIR  # own broker
    python consumer_protocol_test.py --bootstrap HOST:PORT --prefix PREFIX --logdir DIR

With --flume the broker runs with --consumer-session-timeout-ms 6000 (Kafka's
group.consumer.session.timeout.ms: a consumer-protocol client cannot set it); against a
running broker the killed-consumer scenario waits out that broker's session timeout.

Scenarios (one PASS/FAIL line each, as common.Reporter prints them):
  join-and-leave   3 consumers on a 4-partition topic join one by one, then one leaves, while
                   400 records arrive in 4 waves; each record is read exactly once (each
                   consumer commits every record before its next poll); at the end the
                   committed offsets are the log ends
  killed-consumer  a consumer in a subprocess is killed (SIGKILL) while owning partitions:
                   they move to the survivor after the session timeout, which reads every
                   record produced afterwards
  regex-subscription  a consumer subscribed to `^PREFIX-rx-.*` (sent to the broker as a regex)
                   reads the records of the two topics that match and not of the one that
                   does not, then of a matching topic created after it joined
  classic-and-consumer  on one topic, a classic group (group.protocol=classic, JoinGroup and
                   SyncGroup) of one consumer and a consumer-protocol group of two each read
                   every record once and commit it; the admin client lists both with their
                   type (ListGroups v5) and describes both (the consumer-protocol one through
                   ConsumerGroupDescribe: its members and the partitions each is assigned)
  classic-takeover a classic group reads and commits, and its consumer leaves; a
                   consumer-protocol consumer then joins the empty group and reads from the
                   classic group's committed offsets: only the records produced after them
Every wait is a condition with a deadline (common.DEADLINE_S); consumers are closed at the end.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from confluent_kafka import ConsumerGroupState, ConsumerGroupType, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import confluent_test  # noqa: E402
import probe  # noqa: E402

CLIENT = "consumer-protocol"
PARTITIONS = 4
SESSION_MS = 6000
SCENARIOS = ["join-and-leave", "killed-consumer", "regex-subscription", "classic-and-consumer", "classic-takeover"]
APIS = {68: "ConsumerGroupHeartbeat"}


def consumer_conf(bootstrap, group, protocol="consumer", **extra):
    if protocol == "classic":
        # librdkafka's default protocol; the classic group's own timeouts, the client's assignor.
        extra = {**confluent_test.CONSUMER, **extra}
    c = confluent_test.conf(
        bootstrap,
        **{
            "group.id": group,
            "group.protocol": protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        },
    )
    c.update(extra)
    return c


def produce(bootstrap, topic, first, n):
    """n records `first`..first+n-1, spread evenly over the partitions."""
    p = Producer(confluent_test.conf(bootstrap))
    for i in range(first, first + n):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    left = p.flush(common.DEADLINE_S)
    if left:
        raise RuntimeError(f"{left} records not delivered")


class Member:
    """A consumer polling on its own thread; commits every record before its next poll."""

    def __init__(self, bootstrap, group, topic, name, seen, lock, with_topic=False, protocol="consumer"):
        self.name = name
        self.c = Consumer(consumer_conf(bootstrap, group, protocol, **{"client.id": name}))
        # What it owns, kept by the rebalance callbacks on its polling thread (incremental
        # with this protocol): assignment() from another thread waits for the poll.
        self.owned = set()
        self.c.subscribe([topic], on_assign=self.assigned, on_revoke=self.revoked, on_lost=self.revoked)
        self.seen, self.lock, self.with_topic = seen, lock, with_topic
        self.stop = threading.Event()
        self.errors = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                m = self.c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                with self.lock:
                    key = (m.topic(), m.partition(), m.offset()) if self.with_topic else (m.partition(), m.offset())
                    self.seen.append(key + (self.name,))
                self.c.commit(message=m, asynchronous=False)
            except KafkaException as e:
                self.errors.append(str(e))

    def assigned(self, _c, tps):
        self.owned |= {(tp.topic, tp.partition) for tp in tps}

    def revoked(self, _c, tps):
        self.owned -= {(tp.topic, tp.partition) for tp in tps}

    def assignment(self):
        """The partitions it owns: numbers (one topic), or (topic, number) with with_topic."""
        return set(self.owned) if self.with_topic else {p for _, p in self.owned}

    def close(self):
        self.stop.set()
        self.t.join(common.DEADLINE_S)
        self.c.close()


def committed_of(bootstrap, group, topic):
    """What `group` committed, read through OffsetFetch by a client outside it."""
    c = Consumer(confluent_test.conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps}


def join_and_leave(bootstrap, pre):
    topic, group = f"{pre}-jl", f"{pre}-jl-g"
    confluent_test.create_topic(bootstrap, topic, PARTITIONS)
    seen, lock, members, problems = [], threading.Lock(), {}, []

    def count():
        with lock:
            return len(seen)

    def split_among(names):
        """Every partition owned by exactly one of `names`, each owning some."""
        owned = [members[n].assignment() for n in names]
        union = set().union(*owned)
        return all(owned) and union == set(range(PARTITIONS)) and sum(map(len, owned)) == PARTITIONS

    try:
        members["a"] = Member(bootstrap, group, topic, "a", seen, lock)
        common.wait_for(lambda: split_among(["a"]), common.DEADLINE_S, "a owns the 4 partitions")
        produce(bootstrap, topic, 0, 100)
        common.wait_for(lambda: count() >= 100, common.DEADLINE_S, "the first 100 records")
        for wave, name in [(1, "b"), (2, "c")]:
            members[name] = Member(bootstrap, group, topic, name, seen, lock)
            names = sorted(members)
            common.wait_for(lambda: split_among(names), common.DEADLINE_S, f"the partitions split among {names}")
            produce(bootstrap, topic, wave * 100, 100)
            common.wait_for(lambda w=wave: count() >= (w + 1) * 100, common.DEADLINE_S, f"records of wave {wave}")
        members.pop("b").close()
        common.wait_for(lambda: split_among(["a", "c"]), common.DEADLINE_S, "the partitions split among a and c")
        produce(bootstrap, topic, 300, 100)
        common.wait_for(lambda: count() >= 400, common.DEADLINE_S, "all 400 records")
        time.sleep(0.5)  # not a synchronisation: a window for a duplicate to show up
        with lock:
            keys = [(p, o) for p, o, _ in seen]
            readers = {n for _, _, n in seen}
        if len(keys) != 400 or len(set(keys)) != 400:
            problems.append(f"{len(keys)} reads of {len(set(keys))} distinct records, want 400 of 400")
        if readers != {"a", "b", "c"}:
            problems.append(f"records read by {sorted(readers)}, want a, b and c")
        for m in members.values():
            problems += [f"{m.name}: {e}" for e in m.errors[:3]]
    finally:
        for m in members.values():
            m.close()
    got = committed_of(bootstrap, group, topic)
    if got != {p: 100 for p in range(PARTITIONS)}:
        problems.append(f"committed offsets {got}, want 100 on each partition")
    return problems


CHILD = """
import json, sys
from confluent_kafka import Consumer
conf = json.loads(sys.argv[1])
c = Consumer(conf)
c.subscribe([sys.argv[2]])
last = None
while True:
    m = c.poll(0.2)
    if m is not None and not m.error():
        c.commit(message=m, asynchronous=False)
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


def killed_consumer(bootstrap, pre, session_s):
    topic, group = f"{pre}-kill", f"{pre}-kill-g"
    confluent_test.create_topic(bootstrap, topic, PARTITIONS)
    seen, lock, problems = [], threading.Lock(), []
    a = Member(bootstrap, group, topic, "a", seen, lock)
    child = None
    try:
        common.wait_for(lambda: len(a.assignment()) == PARTITIONS, common.DEADLINE_S, "a owns the 4 partitions")
        conf = consumer_conf(bootstrap, group, **{"client.id": "b"})
        child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(conf), topic],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        owned = {"b": []}

        def read_child():
            for line in child.stdout:
                try:
                    owned["b"] = json.loads(line)
                except ValueError:
                    pass

        threading.Thread(target=read_child, daemon=True).start()
        common.wait_for(lambda: len(owned["b"]) == 2 and len(a.assignment()) == 2, common.DEADLINE_S,
                        "a and the child own two partitions each")
        killed_at = time.monotonic()
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        common.wait_for(lambda: len(a.assignment()) == PARTITIONS, session_s + common.DEADLINE_S,
                        "a owns the 4 partitions again")
        took = time.monotonic() - killed_at
        common.log(f"[{CLIENT}] the killed consumer's partitions moved after {took:.1f}s (session {session_s:.0f}s)")
        if took < session_s * 0.8:
            problems.append(f"partitions moved after {took:.1f}s, before the {session_s:.0f}s session timeout")
        produce(bootstrap, topic, 0, 100)
        common.wait_for(lambda: len(seen) >= 100, common.DEADLINE_S, "a reads the 100 records")
        with lock:
            keys = {(p, o) for p, o, _ in seen}
        if len(keys) != 100:
            problems.append(f"{len(keys)} distinct records read, want 100")
        problems += [f"a: {e}" for e in a.errors[:3]]
    finally:
        if child and child.poll() is None:
            child.kill()
        a.close()
    return problems


def regex_subscription(bootstrap, pre):
    group = f"{pre}-rx-g"
    a, b, other, late = f"{pre}-rx-a", f"{pre}-rx-b", f"{pre}-other", f"{pre}-rx-late"
    for t in (a, b, other):
        confluent_test.create_topic(bootstrap, t, PARTITIONS)
    seen, lock, problems = [], threading.Lock(), []
    m = Member(bootstrap, group, f"^{pre}-rx-.*", "a", seen, lock, with_topic=True)
    try:
        common.wait_for(lambda: len(m.assignment()) == 2 * PARTITIONS, common.DEADLINE_S,
                        "the 8 partitions of the two matching topics")
        for t in (a, b, other):
            produce(bootstrap, t, 0, 20)
        common.wait_for(lambda: len(seen) >= 40, common.DEADLINE_S, "the 40 records of the matching topics")
        confluent_test.create_topic(bootstrap, late, PARTITIONS)
        produce(bootstrap, late, 0, 20)
        common.wait_for(lambda: len(seen) >= 60, common.DEADLINE_S, "the 20 records of the topic created later")
        time.sleep(0.5)  # not a synchronisation: a window for a stray record to show up
        with lock:
            topics = sorted({t for t, _, _, _ in seen})
            n = len(seen)
        if topics != sorted([a, b, late]) or n != 60:
            problems.append(f"read {n} records of {topics}, want 60 of {sorted([a, b, late])}")
        problems += [f"a: {e}" for e in m.errors[:3]]
    finally:
        m.close()
    return problems


def listed_groups(admin):
    """group id -> (type, state) of every group ListGroups answers."""
    res = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    return {g.group_id: (g.type, g.state) for g in res.valid}


def exactly_once(seen, n, who):
    """seen: (partition, offset, name) tuples; problems unless n distinct records, each once."""
    keys = [(p, o) for p, o, _ in seen]
    if len(keys) != n or len(set(keys)) != n:
        return [f"{who}: {len(keys)} reads of {len(set(keys))} distinct records, want {n} of {n}"]
    return []


def classic_and_consumer(bootstrap, pre):
    topic, g_classic, g_consumer = f"{pre}-mix", f"{pre}-mix-classic", f"{pre}-mix-consumer"
    confluent_test.create_topic(bootstrap, topic, PARTITIONS)
    seen_classic, seen_consumer, lock, problems = [], [], threading.Lock(), []
    members = []
    try:
        classic = Member(bootstrap, g_classic, topic, "cl", seen_classic, lock, protocol="classic")
        members.append(classic)
        ca = Member(bootstrap, g_consumer, topic, "ca", seen_consumer, lock)
        members.append(ca)
        common.wait_for(lambda: len(ca.assignment()) == PARTITIONS, common.DEADLINE_S, "ca owns the 4 partitions")
        cb = Member(bootstrap, g_consumer, topic, "cb", seen_consumer, lock)
        members.append(cb)

        def split():
            a, b = ca.assignment(), cb.assignment()
            return a and b and not a & b and a | b == set(range(PARTITIONS))

        common.wait_for(split, common.DEADLINE_S, "the partitions split between ca and cb")
        common.wait_for(lambda: len(classic.assignment()) == PARTITIONS, common.DEADLINE_S,
                        "the classic group's consumer owns the 4 partitions")
        produce(bootstrap, topic, 0, 200)
        common.wait_for(lambda: len(seen_classic) >= 200 and len(seen_consumer) >= 200, common.DEADLINE_S,
                        "200 records in each group")
        admin = AdminClient(confluent_test.conf(bootstrap))
        # Both listed, each with its type, while their members are in.
        want = {g_classic: ConsumerGroupType.CLASSIC, g_consumer: ConsumerGroupType.CONSUMER}
        listed = listed_groups(admin)
        for g, t in want.items():
            if g not in listed:
                problems.append(f"list_consumer_groups does not list {g}")
            elif listed[g][0] != t:
                problems.append(f"list_consumer_groups: {g} has type {listed[g][0]}, want {t}")
        owned = {"cl": classic.assignment(), "ca": ca.assignment(), "cb": cb.assignment()}
        fs = admin.describe_consumer_groups([g_classic, g_consumer], request_timeout=10)
        for g, f in fs.items():
            try:
                d = f.result(timeout=15)
            except KafkaException as e:
                problems.append(f"describe_consumer_groups({g}): {e}")
                continue
            if d.type != want[g]:
                problems.append(f"described {g} with type {d.type}, want {want[g]}")
            got = {}
            for m in d.members:
                tps = m.assignment.topic_partitions if m.assignment else []
                got[m.client_id] = {tp.partition for tp in tps if tp.topic == topic}
            names = ["cl"] if g == g_classic else ["ca", "cb"]
            expected = {n: owned[n] for n in names}
            if got != expected:
                problems.append(f"described {g}'s members and assignments as {got}, want {expected}")
            common.log(f"[{CLIENT}] {g}: {d.type}, {d.state}, assignor {d.partition_assignor!r}, members {got}")
        time.sleep(0.5)  # not a synchronisation: a window for a duplicate to show up
        with lock:
            problems += exactly_once(seen_classic, 200, "classic group")
            problems += exactly_once(seen_consumer, 200, "consumer-protocol group")
            readers = {n for _, _, n in seen_consumer}
        if readers != {"ca", "cb"}:
            problems.append(f"the consumer-protocol group's records read by {sorted(readers)}, want ca and cb")
        for m in members:
            problems += [f"{m.name}: {e}" for e in m.errors[:3]]
    finally:
        for m in members:
            m.close()
    for g in (g_classic, g_consumer):
        got = committed_of(bootstrap, g, topic)
        if got != {p: 50 for p in range(PARTITIONS)}:
            problems.append(f"{g} committed {got}, want 50 on each partition")
    return problems


def classic_takeover(bootstrap, pre):
    topic, group = f"{pre}-tk", f"{pre}-tk-g"
    confluent_test.create_topic(bootstrap, topic, PARTITIONS)
    seen, lock, problems = [], threading.Lock(), []
    admin = AdminClient(confluent_test.conf(bootstrap))
    produce(bootstrap, topic, 0, 100)
    classic = Member(bootstrap, group, topic, "cl", seen, lock, protocol="classic")
    try:
        common.wait_for(lambda: len(seen) >= 100, common.DEADLINE_S, "the classic consumer reads 100 records")
        problems += exactly_once(seen, 100, "classic consumer")
    finally:
        classic.close()
    problems += [f"cl: {e}" for e in classic.errors[:3]]
    got = committed_of(bootstrap, group, topic)
    if got != {p: 25 for p in range(PARTITIONS)}:
        return problems + [f"the classic group committed {got}, want 25 on each partition"]
    common.wait_for(lambda: listed_groups(admin).get(group, (None, None))[1] == ConsumerGroupState.EMPTY,
                    common.DEADLINE_S, "the classic group listed Empty once its consumer left")
    produce(bootstrap, topic, 100, 100)
    with lock:
        seen.clear()
    m = Member(bootstrap, group, topic, "cp", seen, lock)
    try:
        common.wait_for(lambda: len(m.assignment()) == PARTITIONS, common.DEADLINE_S,
                        "the consumer-protocol consumer owns the 4 partitions of the group")
        t = listed_groups(admin).get(group, (None, None))[0]
        if t != ConsumerGroupType.CONSUMER:
            problems.append(f"list_consumer_groups: the group has type {t} after the takeover, want {ConsumerGroupType.CONSUMER}")
        common.wait_for(lambda: len(seen) >= 100, common.DEADLINE_S, "the 100 records produced after the commits")
        time.sleep(0.5)  # not a synchronisation: a window for a re-read record to show up
        with lock:
            old = [(p, o) for p, o, _ in seen if o < 25]
            problems += exactly_once(seen, 100, "consumer-protocol consumer")
        if old:
            problems.append(f"{len(old)} records before the classic group's commits read again (e.g. {old[0]})")
        problems += [f"cp: {e}" for e in m.errors[:3]]
    finally:
        m.close()
    got = committed_of(bootstrap, group, topic)
    if got != {p: 50 for p in range(PARTITIONS)}:
        problems.append(f"committed {got} after the takeover, want 50 on each partition")
    return problems


def preflight(bootstrap):
    try:
        apis = {k: (lo, hi) for k, lo, hi in probe.probe(bootstrap, 10)}
    except (OSError, ValueError) as e:
        return f"{bootstrap} does not answer ApiVersions: {type(e).__name__}: {e}"
    missing = [f"{name} ({k})" for k, name in APIS.items() if k not in apis]
    return f"the broker does not advertise {', '.join(missing)}" if missing else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--flume", help="flume-cli: start a broker of our own")
    where.add_argument("--bootstrap", help="a running Kafka-protocol broker")
    ap.add_argument("--prefix", default=f"kc{int(time.time())}{os.getpid()}")
    ap.add_argument("--logdir", default=None)
    ap.add_argument("--session-ms", type=int, default=45000, help="the running broker's session timeout")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    args = ap.parse_args()
    if args.logdir is None:
        args.logdir = tempfile.mkdtemp(prefix="flume-cp-")
    os.makedirs(args.logdir, exist_ok=True)
    pre = f"{args.prefix}-cp"
    rep = common.Reporter(CLIENT)
    names = [s for s in args.only.split(",") if s] or SCENARIOS
    import share_test  # its Broker: flume-cli on free ports in a temp dir

    try:
        try:
            if args.flume:
                bootstrap = share_test.Broker(args.flume, args.logdir, "cp-broker",
                                              ["--consumer-session-timeout-ms", str(SESSION_MS)]).bootstrap
                session_s = SESSION_MS / 1000
            else:
                bootstrap, session_s = args.bootstrap, args.session_ms / 1000
        except Exception as e:
            common.log(traceback.format_exc())
            for name in names:
                rep.run(name, lambda w=f"setup failed: {type(e).__name__}: {e}": [w])
            return
        why = preflight(bootstrap)
        runs = {
            "join-and-leave": (join_and_leave, (bootstrap, pre), 6),
            "killed-consumer": (killed_consumer, (bootstrap, pre, session_s), 4),
            "regex-subscription": (regex_subscription, (bootstrap, pre), 4),
            "classic-and-consumer": (classic_and_consumer, (bootstrap, pre), 5),
            "classic-takeover": (classic_takeover, (bootstrap, pre), 6),
        }
        for name in names:
            fn, fargs, factor = runs[name]
            if why:
                rep.run(name, lambda w=why: [f"not run: {w}"])
            else:
                rep.run(name, fn, *fargs, timeout=factor * common.DEADLINE_S + session_s + 30)
    finally:
        share_test.stop_brokers()
        rep.finish()


if __name__ == "__main__":
    sys.exit(main())
