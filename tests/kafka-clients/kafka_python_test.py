#!/usr/bin/env python3
"""kafka-python (pure Python) against a Kafka-protocol broker.

    python kafka_python_test.py BOOTSTRAP PREFIX LOGDIR     # every scenario
    python kafka_python_test.py member BOOTSTRAP GROUP TOPIC  # one group member

Client defaults kept as shipped (api_version probed with ApiVersions, acks=all,
enable_idempotence=True in kafka-python 3.x, range then round-robin assignors);
only timeouts are shortened so a broken broker fails in seconds.
"""

import logging
import os
import sys
import threading
import time
import traceback

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import CommitFailedError, RebalanceInProgressError
from kafka.structs import OffsetAndMetadata, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CLIENT = "kafka-python"

BASE = {
    "request_timeout_ms": 10000,
    # Diagnostics only: KAFKA_PYTHON_API_VERSION=2.8 skips probing with ApiVersions v4
    # (librdkafka's mock cluster answers that probe in a form kafka-python cannot read).
    "api_version": tuple(int(x) for x in os.environ["KAFKA_PYTHON_API_VERSION"].split(".")) if os.environ.get("KAFKA_PYTHON_API_VERSION") else None,
    "bootstrap_timeout_ms": 10000,
    "reconnect_backoff_max_ms": 1000,
    "metadata_max_age_ms": 10000,
}
CONSUMER = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "max_poll_interval_ms": 10000,
    "fetch_max_wait_ms": 100,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}


def create_topic(bootstrap, topic, partitions=common.PARTITIONS, configs=None):
    if not common.AUTO_CREATE:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **BASE)
        try:
            admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=1, topic_configs=configs or {})],
                timeout_ms=10000)
        finally:
            admin.close()
    else:
        # A producer's metadata request for the topic asks the broker to create it.
        p = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000, **BASE)
        try:
            p.partitions_for(topic)
        finally:
            p.close(timeout=5)
    c = KafkaConsumer(bootstrap_servers=bootstrap, **BASE)
    try:
        common.wait_for(lambda: c.partitions_for_topic(topic), 10, f"metadata of {topic}")
        if not common.AUTO_CREATE:
            common.wait_for(lambda: c.partitions_for_topic(topic) == set(range(partitions)), 10, f"metadata of {topic}")
    finally:
        c.close(autocommit=False)


def scenario_topic_configs(bootstrap, topic):
    """CreateTopics with topic_configs, DescribeConfigs (every config, and only those set on
    the topic), alter_configs (IncrementalAlterConfigs SET, kafka-python 3's default)."""
    problems = []
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **BASE)
    try:
        admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=1,
                      topic_configs={"cleanup.policy": "compact", "segment.bytes": "1048576"})],
            timeout_ms=10000)
        res = ConfigResource(ConfigResourceType.TOPIC, topic)

        def described(config_filter):
            got = admin.describe_configs([res], config_filter=config_filter)
            return {k: v.get("value") for k, v in got["topic"][topic].items()}

        every = described("all")
        for name, want in [("cleanup.policy", "compact"), ("segment.bytes", "1048576"),
                           ("min.insync.replicas", "1"), ("max.message.bytes", "1048588")]:
            if every.get(name) != want:
                problems.append(f"{name}: {every.get(name)!r}, expected {want!r}")
        modified = described("modified")
        if set(modified) != {"cleanup.policy", "segment.bytes"}:
            problems.append(f"configs set on the topic: {sorted(modified)}, expected cleanup.policy and segment.bytes")
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "60000"})])
        every = described("all")
        if every.get("retention.ms") != "60000":
            problems.append(f"after alter_configs retention.ms={every.get('retention.ms')!r}")
        if every.get("cleanup.policy") != "compact":
            problems.append(f"after alter_configs cleanup.policy={every.get('cleanup.policy')!r}, expected it kept")
    finally:
        admin.close()
    return problems


def scenario_metadata(bootstrap, topic):
    create_topic(bootstrap, topic)
    c = KafkaConsumer(bootstrap_servers=bootstrap, **BASE)
    problems = []
    try:
        topics = c.topics()  # metadata of all topics
        if topic not in topics:
            problems.append(f"topic {topic} not listed among {len(topics)} topics")
        parts = c.partitions_for_topic(topic)
        if parts != set(range(common.PARTITIONS)):
            problems.append(f"partitions {parts}, expected 0..{common.PARTITIONS - 1}")
    finally:
        c.close(autocommit=False)
    return problems


def produce_records(bootstrap, topic, plan):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=5,
        max_block_ms=10000,
        delivery_timeout_ms=15000,
        **BASE,
    )
    delivered, errors = {}, []
    try:
        futures = []
        for r in plan:
            futures.append(
                (
                    r,
                    producer.send(
                        topic,
                        value=r["value"],
                        key=r["key"],
                        headers=list(r["headers"]),
                        partition=r.get("partition"),
                        timestamp_ms=r["timestamp"],
                    ),
                )
            )
        producer.flush(timeout=20)
        for r, f in futures:
            try:
                md = f.get(timeout=1)
                delivered[r["value"]] = (md.partition, md.offset)
            except Exception as e:
                errors.append(f"delivery of {r['value']!r} failed: {type(e).__name__}: {e}")
    finally:
        producer.close(timeout=5)
    return delivered, errors


def consume_all(bootstrap, topic, n):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **BASE, **CONSUMER)
    out = []
    try:
        c.assign([TopicPartition(topic, p) for p in range(common.PARTITIONS)])
        c.seek_to_beginning()
        end = time.monotonic() + common.DEADLINE_S
        while len(out) < n and time.monotonic() < end:
            for recs in c.poll(timeout_ms=200).values():
                for m in recs:
                    out.append(
                        {
                            "key": m.key,
                            "value": m.value,
                            "headers": [(k, v) for k, v in (m.headers or [])],
                            "timestamp": m.timestamp,
                            "timestamp_type": m.timestamp_type,
                            "partition": m.partition,
                            "offset": m.offset,
                        }
                    )
    finally:
        c.close(autocommit=False)
    return out


def scenario_produce(bootstrap, topic, state):
    create_topic(bootstrap, topic)
    plan = common.produce_plan(topic)
    t0 = common.now_ms()
    delivered, errors = produce_records(bootstrap, topic, plan)
    state.update(plan=plan, delivered=delivered, t0=t0, t1=common.now_ms())
    return errors + common.check_delivered(plan, delivered)


def scenario_consume(bootstrap, topic, state):
    if "plan" not in state:
        return ["not run: the produce scenario did not run"]
    plan = state["plan"]
    consumed = consume_all(bootstrap, topic, len(plan))
    problems = []
    if len(consumed) != len(plan):
        problems.append(f"consumed {len(consumed)} of {len(plan)} records within {common.DEADLINE_S:.0f}s")
    for c in consumed:
        if c["timestamp_type"] != 0:
            problems.append(f"{c['value']!r}: timestamp type {c['timestamp_type']}, expected 0 (CreateTime)")
            break
    return problems + common.check_consumed(plan, state["delivered"], consumed, state["t0"], state["t1"])


def produce_to_partitions(bootstrap):
    def produce(topic, tag, per_partition):
        plan = []
        for p in range(common.PARTITIONS):
            for i in range(per_partition):
                v = common.group_values(topic, tag, p, i)
                plan.append({"key": v.encode(), "value": v.encode(), "headers": [], "timestamp": None, "partition": p})
        delivered, errors = produce_records(bootstrap, topic, plan)
        if errors:
            raise RuntimeError("; ".join(errors[:3]))
        return [r["value"].decode() for r in plan]

    return produce


def committed(bootstrap):
    def get(group, topic, partitions):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **BASE, **CONSUMER)
        try:
            return {p: c.committed(TopicPartition(topic, p)) for p in range(partitions)}
        finally:
            c.close(autocommit=False)

    return get


class Listener(ConsumerRebalanceListener):
    def __init__(self, io):
        self.io = io

    def on_partitions_revoked(self, revoked):
        self.io.emit(ev="assigned", partitions=[])

    def on_partitions_assigned(self, assigned):
        self.io.emit(ev="assigned", partitions=[tp.partition for tp in assigned])


def member(bootstrap, group, topic):
    # kafka-python's own account of coordinator lookups, joins and syncs goes to this
    # member's log (run.sh prints it when the group scenario fails).
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if os.environ.get("KP_DEBUG") else logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    io = common.MemberIO()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **BASE, **CONSUMER)
    # The topic's partitions are known before the first join. kafka-python 3.0.12
    # otherwise joins with no metadata for the topic, so its leader assigns nothing and
    # rejoins once the metadata arrives; if that rejoin's JoinGroup is still in flight
    # when poll(timeout_ms=100) returns, the next poll finds need_rejoin() false (the
    # leader's snapshot now matches) and never collects the finished join: the member
    # stays REBALANCING without heartbeats until its session expires (the SyncGroup
    # answer is in its debug log; KP_DEBUG=1 turns that log on). Seen in about 1 of 30
    # runs before this wait.
    try:
        common.wait_for(lambda: c.partitions_for_topic(topic), common.DEADLINE_S, f"the partitions of {topic}")
        c.subscribe([topic], listener=Listener(io))
        while not io.stop.is_set():
            for tp, recs in c.poll(timeout_ms=100).items():
                for m in recs:
                    io.emit(ev="record", p=m.partition, o=m.offset, v=m.value.decode())
                    try:
                        c.commit({tp: OffsetAndMetadata(m.offset + 1, "", -1)})  # processed: commit offset + 1
                    except (CommitFailedError, RebalanceInProgressError) as e:  # the record comes again
                        common.log(f"commit failed: {e}")
                        io.emit(ev="commit_failed", msg=f"{type(e).__name__}: {e}")
    except Exception as e:
        common.log(traceback.format_exc())
        io.emit(ev="error", msg=f"{type(e).__name__}: {e}")
    finally:
        c.close(autocommit=False)  # leaves the group


def scenario_admin(bootstrap, topic):
    """The admin APIs Kafka tools use: CreatePartitions, ListOffsets' max timestamp,
    OffsetDelete, DeleteGroups, DescribeLogDirs."""
    from kafka.admin import OffsetSpec
    from kafka.errors import GroupIdNotFoundError, InvalidPartitionsError, NoError

    create_topic(bootstrap, topic)
    problems = []
    now = common.now_ms()
    stamps = [now - 3000, now - 1000, now - 2000]  # the largest is the second record's
    p = KafkaProducer(bootstrap_servers=bootstrap, **BASE)
    try:
        for i, ts in enumerate(stamps):
            p.send(topic, value=f"v{i}".encode(), partition=0, timestamp_ms=ts).get(timeout=15)
    finally:
        p.close(timeout=5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **BASE)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        found = admin.list_partition_offsets({tp0: OffsetSpec.MAX_TIMESTAMP})
        got = (found[tp0].offset, found[tp0].timestamp)
        if got != (1, stamps[1]):
            problems.append(f"max timestamp: {got}, expected (1, {stamps[1]})")

        admin.create_partitions({topic: common.PARTITIONS + 2}, timeout_ms=10000)
        c = KafkaConsumer(bootstrap_servers=bootstrap, **BASE)
        try:
            want = set(range(common.PARTITIONS + 2))
            common.wait_for(lambda: c.partitions_for_topic(topic) == want, common.DEADLINE_S, f"{topic} with {len(want)} partitions in the metadata")
        finally:
            c.close(autocommit=False)
        try:
            admin.create_partitions({topic: common.PARTITIONS + 2}, timeout_ms=10000)
            problems.append("create_partitions to the same count succeeded")
        except InvalidPartitionsError:
            pass

        group = f"{topic}-admin"
        admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(2, "", -1), tp1: OffsetAndMetadata(0, "", -1)})
        deleted = admin.delete_group_offsets(group, [tp1])
        if deleted.get(tp1) is not NoError:
            problems.append(f"delete_group_offsets: {deleted}")
        left = admin.list_group_offsets({group: None}).get(group, {})
        if sorted(left) != [tp0] or left[tp0].offset != 2:
            problems.append(f"after OffsetDelete the group has {left}, expected only {tp0} at 2")
        # Each group's outcome: 'OK' or an error (a name, a class or an instance, by version).
        def outcome(v):
            if isinstance(v, str):
                return v
            if v is NoError or isinstance(v, NoError):
                return "OK"
            return v.__name__ if isinstance(v, type) else type(v).__name__

        results = {g: outcome(v) for g, v in dict(admin.delete_groups([group, f"{topic}-never"])).items()}
        if results != {group: "OK", f"{topic}-never": GroupIdNotFoundError.__name__}:
            problems.append(f"delete_groups: {results}")
        left = admin.list_group_offsets({group: None}).get(group, {})
        if left:
            problems.append(f"the deleted group still has offsets {left}")

        dirs = admin.describe_log_dirs({topic: [0]})
        sizes = [
            pr.get("partition_size")
            for broker in dirs
            for d in broker["log_dirs"]
            for t in d.get("topics", [])
            if t.get("name") == topic
            for pr in t.get("partitions", [])
        ]
        if len(sizes) != 1 or not sizes[0] > 0:
            problems.append(f"describe_log_dirs of partition 0: sizes {sizes} in {dirs}")
    finally:
        admin.close()
    return problems


def scenario_short_sessions(bootstrap, topic):
    """kafka-python's own test_group: 4 members of one group with session_timeout_ms=3000,
    which its fixture lets the broker take by lowering group.min.session.timeout.ms (run.sh
    starts Flume with --group-min-session-timeout-ms 1000; Kafka's default is 6000): every
    member gets partitions of the topic and none has another's."""
    create_topic(bootstrap, topic)
    group = f"{topic}-g"
    stop = threading.Event()
    consumers, errors = {}, []

    def run(i):
        try:
            c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                              **BASE, **dict(CONSUMER, session_timeout_ms=3000, heartbeat_interval_ms=500))
            consumers[i] = c
            while not stop.is_set():
                c.poll(timeout_ms=100)
        except Exception as e:
            errors.append(f"member {i}: {type(e).__name__}: {e}")

    def shares():
        try:
            return [set(consumers[i].assignment()) for i in range(4)]
        except (KeyError, RuntimeError):  # not built yet, or changing under us
            return None

    def balanced():
        if errors:
            raise RuntimeError("; ".join(errors))
        got = shares()
        if not got or any(not s for s in got):
            return False
        every = [tp for s in got for tp in s]
        return len(every) == len(set(every)) == common.PARTITIONS

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    problems = []
    try:
        common.wait_for(balanced, 2 * common.DEADLINE_S, "4 members with 3000 ms sessions to share the partitions")
    except (TimeoutError, RuntimeError) as e:
        problems.append(f"{e}; assignments {shares()}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        for c in consumers.values():
            c.close(autocommit=False)
    return problems


def scenario_broker_configs(bootstrap, topic):
    """DescribeConfigs of the broker by Kafka's names: listeners and advertised.listeners
    (kafka-python's own admin test reads them), and the group session bounds."""
    del topic
    problems = []
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **BASE)
    try:
        node = str(admin.describe_cluster()["brokers"][0]["broker_id"])
        res = ConfigResource(ConfigResourceType.BROKER, node)
        got = admin.describe_configs([res], config_filter="all")
        every = {k: v.get("value") for k, v in got["broker"][node].items()}
        host, port = bootstrap.rsplit(":", 1)
        for name in ("listeners", "advertised.listeners"):
            if not str(every.get(name) or "").endswith(f"://{host}:{port}"):
                problems.append(f"{name}: {every.get(name)!r}, expected PROTOCOL://{bootstrap}")
        for name in ("log.dirs", "num.partitions", "auto.create.topics.enable", "log.retention.ms",
                     "log.segment.bytes", "group.initial.rebalance.delay.ms",
                     "group.min.session.timeout.ms", "group.max.session.timeout.ms"):
            if every.get(name) in (None, ""):
                problems.append(f"{name} is not described")
        low = every.get("group.min.session.timeout.ms")
        if low is not None and int(low) > 3000:
            problems.append(f"group.min.session.timeout.ms is {low}: the broker must take 3000 ms sessions")
    finally:
        admin.close()
    return problems


def read_partition(bootstrap, tp, last, **extra):
    """(offset, key, value) of every record of tp from its start, until the one at
    offset `last` is read or the deadline passes."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **{**BASE, **CONSUMER, **extra})
    out = []
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = time.monotonic() + common.DEADLINE_S
        while time.monotonic() < end and (not out or out[-1][0] < last):
            for recs in c.poll(timeout_ms=200).values():
                out += [(m.offset, m.key, m.value) for m in recs]
    finally:
        c.close(autocommit=False)
    return out


def scenario_compaction(bootstrap, topic):
    """A compacted topic with small segments (common.compaction_plan: many values per
    key, tombstones, then one batch per record to roll the segments): once the broker's
    cleaner has run, a consumer from the start sees each key once with its newest value
    (None for the deleted ones) at the offset the producer was told. A keyless record is
    refused with INVALID_RECORD."""
    from kafka.errors import InvalidRecordError

    create_topic(bootstrap, topic, partitions=1, configs=common.COMPACT_CONFIG)
    acked = {}
    problems = []
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, max_block_ms=10000, delivery_timeout_ms=15000, **BASE)
    try:
        for batch in common.compaction_plan():
            sent = [(k, v, p.send(topic, key=k, value=v, partition=0)) for k, v in batch]
            p.flush(timeout=15)  # one batch at a time: segments roll between batches
            for k, v, f in sent:
                acked[f.get(timeout=1).offset] = (k, v)
    finally:
        p.close(timeout=5)
    # A producer of its own: the refused record must not disturb the one above.
    p = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000, delivery_timeout_ms=15000, **BASE)
    try:
        p.send(topic, value=b"no key", partition=0).get(timeout=15)
        problems.append("a keyless record on a compacted topic was acknowledged")
    except InvalidRecordError:
        pass
    except Exception as e:
        problems.append(f"a keyless record on a compacted topic: {type(e).__name__}: {e}, expected InvalidRecordError")
    finally:
        p.close(timeout=5)
    tp = TopicPartition(topic, 0)
    last = max(acked)

    def cleaned():
        got = read_partition(bootstrap, tp, last)
        return got if common.compaction_cleaned(got) else None

    got = common.wait_for(cleaned, common.DEADLINE_S, "the cleaner to leave one record of each key")
    return problems + common.check_compacted(acked, got)


def scenario_delete_records(bootstrap, topic):
    """DeleteRecords moves the log start: the earliest offset is the new start, a consumer
    from the beginning starts there, a fetch below it is OFFSET_OUT_OF_RANGE (reset to the
    new start with auto_offset_reset=earliest, raised with 'none'); past the end is
    refused; -1 deletes everything."""
    from kafka.errors import OffsetOutOfRangeError

    create_topic(bootstrap, topic, partitions=1)
    n, before = common.DELETE_RECORDS_COUNT, common.DELETE_RECORDS_BEFORE
    p = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000, delivery_timeout_ms=15000, **BASE)
    try:
        offsets = [p.send(topic, value=f"r{i}".encode(), partition=0).get(timeout=15).offset for i in range(n)]
    finally:
        p.close(timeout=5)
    if offsets != list(range(n)):
        return [f"records acknowledged at {offsets}, expected 0..{n - 1}"]
    problems = []
    tp = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **BASE)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **BASE, **CONSUMER)
    try:
        low = admin.delete_records({tp: before}, timeout_ms=10000)[tp]["low_watermark"]
        if low != before:
            problems.append(f"delete_records before {before}: low watermark {low}")
        span = (c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp])
        if span != (before, n):
            problems.append(f"beginning and end offsets {span}, expected ({before}, {n})")
        got = read_partition(bootstrap, tp, n - 1)
        want = [(o, None, f"r{o}".encode()) for o in range(before, n)]
        if got != want:
            problems.append(f"from the beginning: {got}, expected offsets {before}..{n - 1}")
        # Below the log start: reset to it (earliest), or the error itself ('none').
        c.assign([tp])
        c.seek(tp, 1)
        first = common.wait_for(lambda: [m for recs in c.poll(timeout_ms=200).values() for m in recs], common.DEADLINE_S, "a record after seeking below the log start")
        if first[0].offset != before:
            problems.append(f"after seeking to 1 (below the log start) the first record read is at {first[0].offset}, expected {before}")
        strict = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **{**BASE, **CONSUMER, "auto_offset_reset": "none"})
        try:
            strict.assign([tp])
            strict.seek(tp, 1)
            try:
                common.wait_for(lambda: strict.poll(timeout_ms=200), common.DEADLINE_S, "OffsetOutOfRangeError")
                problems.append("a fetch below the log start returned records with auto_offset_reset='none'")
            except OffsetOutOfRangeError:
                pass
        finally:
            strict.close(autocommit=False)
        try:
            admin.delete_records({tp: n + 1}, timeout_ms=10000)
            problems.append(f"delete_records before {n + 1}, past the end {n}, succeeded")
        except OffsetOutOfRangeError:
            pass
        low = admin.delete_records({tp: -1}, timeout_ms=10000)[tp]["low_watermark"]
        span = (c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp])
        if low != n or span != (n, n):
            problems.append(f"delete_records of everything (-1): low watermark {low}, beginning and end {span}, expected {n}")
    finally:
        c.close(autocommit=False)
        admin.close()
    return problems


def main():
    if sys.argv[1] == "member":
        member(*sys.argv[2:5])
        return 0
    bootstrap, prefix, logdir = sys.argv[1:4]
    pre = f"{prefix}-kp"
    rep = common.Reporter(CLIENT)
    rep.run("metadata", scenario_metadata, bootstrap, f"{pre}-meta")
    state = {}
    rep.run("produce", scenario_produce, bootstrap, f"{pre}-rec", state)
    rep.run("consume", scenario_consume, bootstrap, f"{pre}-rec", state)
    group_result = {}

    def group():
        topic = f"{pre}-grp"
        create_topic(bootstrap, topic)
        me = os.path.abspath(__file__)
        g, r = common.run_group(
            CLIENT,
            pre,
            topic,
            f"{pre}-group",
            lambda grp, t: [sys.executable, me, "member", bootstrap, grp, t],
            produce_to_partitions(bootstrap),
            committed(bootstrap),
            logdir,
        )
        group_result["restart"] = r
        return g

    rep.run("group", group, timeout=5 * common.DEADLINE_S + 30)
    rep.run("group-restart", lambda: group_result.get("restart", ["not run: the group scenario failed before it"]))
    rep.run("admin", scenario_admin, bootstrap, f"{pre}-adm")
    rep.run("topic-configs", scenario_topic_configs, bootstrap, f"{pre}-cfg")
    rep.run("broker-configs", scenario_broker_configs, bootstrap, f"{pre}-bcfg")
    rep.run("short-sessions", scenario_short_sessions, bootstrap, f"{pre}-short", timeout=3 * common.DEADLINE_S)
    rep.run("delete-records", scenario_delete_records, bootstrap, f"{pre}-del")
    rep.run("compaction", scenario_compaction, bootstrap, f"{pre}-cmp", timeout=3 * common.DEADLINE_S)
    rep.finish()


if __name__ == "__main__":
    sys.exit(main())
