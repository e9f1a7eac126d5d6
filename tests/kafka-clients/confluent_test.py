#!/usr/bin/env python3
"""confluent-kafka (librdkafka) against a Kafka-protocol broker.

    python confluent_test.py BOOTSTRAP PREFIX LOGDIR     # every scenario
    python confluent_test.py member BOOTSTRAP GROUP TOPIC  # one group member (used by the group scenarios)

Client defaults kept as shipped (acks=all, enable.idempotence=false, classic group
protocol); only timeouts are shortened so a broken broker fails in seconds.
"""

import os
import subprocess
import sys
import time
import traceback

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CLIENT = "confluent"
CODECS = ["gzip", "snappy", "lz4", "zstd"]

# Short timeouts: every wait below is bounded by seconds, not librdkafka's minutes.
BASE = {
    "socket.timeout.ms": 5000,
    "socket.connection.setup.timeout.ms": 5000,
    "metadata.max.age.ms": 10000,
    "topic.metadata.refresh.interval.ms": 2000,
    "reconnect.backoff.max.ms": 1000,
}
CONSUMER = {
    "session.timeout.ms": 6000,  # Kafka's smallest default group.min.session.timeout.ms
    "heartbeat.interval.ms": 500,
    "max.poll.interval.ms": 10000,
    "fetch.wait.max.ms": 100,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "partition.assignment.strategy": "range",
}


def conf(bootstrap, **extra):
    c = dict(BASE)
    c["bootstrap.servers"] = bootstrap
    c.update(extra)
    return c


def create_topic(bootstrap, topic, partitions=common.PARTITIONS):
    admin = AdminClient(conf(bootstrap))
    if common.AUTO_CREATE:
        # A producer's metadata request asks the broker to create the topic.
        Producer(conf(bootstrap)).list_topics(topic=topic, timeout=10)
        common.wait_for(lambda: partitions_of(admin, topic), 10, f"metadata of {topic}")
        return
    fs = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=5,
        request_timeout=10,
    )
    for f in fs.values():
        f.result(timeout=15)
    # The topic is usable once its metadata lists every partition with a leader.
    common.wait_for(lambda: len(partitions_of(admin, topic)) == partitions, 10, f"metadata of {topic}")


def partitions_of(admin, topic):
    md = admin.list_topics(topic=topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: pm.leader for p, pm in t.partitions.items() if pm.error is None and pm.leader >= 0}


def scenario_metadata(bootstrap, topic):
    create_topic(bootstrap, topic)
    admin = AdminClient(conf(bootstrap))
    md = admin.list_topics(timeout=10)  # all topics, as `kcat -L` and admin tools ask
    problems = []
    t = md.topics.get(topic)
    if t is None:
        return [f"topic {topic} not listed in the metadata of all topics ({len(md.topics)} topics listed)"]
    if t.error is not None:
        problems.append(f"topic error {t.error}")
    if sorted(t.partitions) != list(range(common.PARTITIONS)):
        problems.append(f"partitions {sorted(t.partitions)}, expected 0..{common.PARTITIONS - 1}")
    brokers = set(md.brokers)
    for p, pm in t.partitions.items():
        if pm.leader not in brokers:
            problems.append(f"partition {p}: leader {pm.leader} is not among the listed brokers {sorted(brokers)}")
    return problems


def scenario_topic_configs(bootstrap, topic):
    """CreateTopics with configs, DescribeConfigs, IncrementalAlterConfigs, INVALID_CONFIG."""
    admin = AdminClient(conf(bootstrap))
    problems = []
    fs = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1,
                  config={"cleanup.policy": "compact", "retention.ms": "3600000"})],
        operation_timeout=5, request_timeout=10)
    for f in fs.values():
        f.result(timeout=15)
    res = ConfigResource("topic", topic)

    def described():
        return admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)

    got = described()
    for name, want in [("cleanup.policy", "compact"), ("retention.ms", "3600000"),
                       ("max.message.bytes", "1048588"), ("delete.retention.ms", "86400000")]:
        e = got.get(name)
        if e is None or e.value != want:
            problems.append(f"{name}: {e.value if e else None!r}, expected {want!r}")
    if got.get("cleanup.policy") and got["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
        problems.append(f"cleanup.policy source {got['cleanup.policy'].source}, expected DYNAMIC_TOPIC_CONFIG")
    if got.get("delete.retention.ms") and got["delete.retention.ms"].source != ConfigSource.DEFAULT_CONFIG.value:
        problems.append(f"delete.retention.ms source {got['delete.retention.ms'].source}, expected DEFAULT_CONFIG")
    inc = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
    ])
    admin.incremental_alter_configs([inc], request_timeout=10)[inc].result(timeout=15)
    got = described()
    policy = set(got["cleanup.policy"].value.split(","))
    if policy != {"compact", "delete"}:
        problems.append(f"after APPEND cleanup.policy={got['cleanup.policy'].value!r}")
    if got["retention.ms"].value != "1000":
        problems.append(f"after SET retention.ms={got['retention.ms'].value!r}")
    # confluent-kafka-python's own integration test SUBTRACTs the policies one by one and
    # expects the empty list at the end (Kafka 4: no cleanup policy, every record kept).
    for remove, want in [("compact", "delete"), ("delete", "")]:
        sub = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("cleanup.policy", remove, incremental_operation=AlterConfigOpType.SUBTRACT),
        ])
        try:
            admin.incremental_alter_configs([sub], request_timeout=10)[sub].result(timeout=15)
        except KafkaException as e:
            problems.append(f"SUBTRACT {remove} from cleanup.policy: {e.args[0].name()} {e.args[0].str()!r}")
            break
        e = described().get("cleanup.policy")
        if e is None or (e.value or "") != want or e.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
            problems.append(f"after SUBTRACT {remove}: cleanup.policy {e.value if e else None!r} "
                            f"(source {e.source if e else None}), expected {want!r} set on the topic")
    bad = admin.create_topics(
        [NewTopic(f"{topic}-bad", num_partitions=1, replication_factor=1, config={"cleanup.policy": "shred"})],
        operation_timeout=5, request_timeout=10)
    try:
        bad[f"{topic}-bad"].result(timeout=15)
        problems.append("cleanup.policy=shred was accepted")
    except KafkaException as e:
        err = e.args[0]
        if err.name() != "INVALID_CONFIG" or "shred" not in err.str():
            problems.append(f"cleanup.policy=shred: {err.name()} {err.str()!r}, expected INVALID_CONFIG naming the value")
    return problems


def produce_plan_records(bootstrap, topic, plan, extra=None):
    """Produce the plan; returns (delivered {value: (partition, offset)}, errors)."""
    producer = Producer(conf(bootstrap, **{"linger.ms": 5, "message.timeout.ms": 15000, **(extra or {})}))
    delivered, errors = {}, []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"delivery of {msg.value()!r} failed: {err}")
        else:
            delivered[msg.value()] = (msg.partition(), msg.offset())

    for r in plan:
        kwargs = {"value": r["value"], "on_delivery": on_delivery}
        if r["key"] is not None:
            kwargs["key"] = r["key"]
        if r["headers"]:
            kwargs["headers"] = r["headers"]
        if r["timestamp"] is not None:
            kwargs["timestamp"] = r["timestamp"]
        if "partition" in r:
            kwargs["partition"] = r["partition"]
        producer.produce(topic, **kwargs)
    left = producer.flush(20)
    if left:
        errors.append(f"{left} records still undelivered after 20 s")
    return delivered, errors


def consume_all(bootstrap, topic, n, partitions=common.PARTITIONS):
    """Read every partition from the beginning (assign, no group join) until n records."""
    consumer = Consumer(conf(bootstrap, **{"group.id": f"{topic}-reader", **CONSUMER}))
    out = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        end = time.monotonic() + common.DEADLINE_S
        while len(out) < n and time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            ts_type, ts = msg.timestamp()
            out.append(
                {
                    "key": msg.key(),
                    "value": msg.value(),
                    "headers": [(k, v) for k, v in (msg.headers() or [])],
                    "timestamp": ts,
                    "timestamp_type": ts_type,
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                }
            )
    finally:
        consumer.close()
    return out


def scenario_produce(bootstrap, topic, state):
    create_topic(bootstrap, topic)
    plan = common.produce_plan(topic)
    t0 = common.now_ms()
    delivered, errors = produce_plan_records(bootstrap, topic, plan)
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
        if c["timestamp_type"] != TIMESTAMP_CREATE_TIME:
            problems.append(f"{c['value']!r}: timestamp type {c['timestamp_type']}, expected CreateTime")
            break
    return problems + common.check_consumed(plan, state["delivered"], consumed, state["t0"], state["t1"])


def scenario_compression(bootstrap, topic, codec):
    create_topic(bootstrap, topic, partitions=1)
    # Compressible values, several per batch (linger) so a batch really holds many records.
    plan = [
        {"key": f"k{i}".encode(), "value": (f"{codec}-{i}-" + "flume " * 40).encode(), "headers": [("c", codec.encode())], "timestamp": None, "partition": 0}
        for i in range(50)
    ]
    delivered, errors = produce_plan_records(bootstrap, topic, plan, {"compression.type": codec, "linger.ms": 50})
    if errors:
        return errors
    consumed = consume_all(bootstrap, topic, len(plan), partitions=1)
    problems = []
    if [c["value"] for c in consumed] != [r["value"] for r in plan]:
        problems.append(f"consumed {len(consumed)} records, expected the {len(plan)} produced, in order")
    for c, r in zip(consumed, plan):
        if c["key"] != r["key"] or c["headers"] != r["headers"]:
            problems.append(f"record {r['value'][:12]!r}: key/headers {c['key']!r}/{c['headers']!r}")
            break
    return problems


def produce_to_partitions(bootstrap):
    def produce(topic, tag, per_partition):
        plan = []
        for p in range(common.PARTITIONS):
            for i in range(per_partition):
                v = common.group_values(topic, tag, p, i)
                plan.append({"key": v.encode(), "value": v.encode(), "headers": [], "timestamp": None, "partition": p})
        delivered, errors = produce_plan_records(bootstrap, topic, plan)
        if errors:
            raise RuntimeError("; ".join(errors[:3]))
        return [r["value"].decode() for r in plan]

    return produce


def committed(bootstrap):
    def get(group, topic, partitions):
        c = Consumer(conf(bootstrap, **{"group.id": group, **CONSUMER}))
        try:
            tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in tps}

    return get


def member(bootstrap, group, topic):
    io = common.MemberIO()
    c = Consumer(conf(bootstrap, **{"group.id": group, **CONSUMER}))

    def on_assign(consumer, partitions):
        io.emit(ev="assigned", partitions=[tp.partition for tp in partitions])

    def on_revoke(consumer, partitions):
        io.emit(ev="assigned", partitions=[])

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    try:
        while not io.stop.is_set():
            msg = c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                io.emit(ev="error", msg=str(msg.error()))
                continue
            io.emit(ev="record", p=msg.partition(), o=msg.offset(), v=msg.value().decode())
            try:
                c.commit(message=msg, asynchronous=False)  # processed: commit offset + 1
            except KafkaException as e:  # e.g. a rebalance under way: the record comes again
                common.log(f"commit failed: {e}")
                io.emit(ev="commit_failed", msg=str(e))
    except Exception as e:
        common.log(traceback.format_exc())
        io.emit(ev="error", msg=f"{type(e).__name__}: {e}")
    finally:
        c.close()  # leaves the group


def scenario_admin(bootstrap, topic):
    """AdminClient: create_partitions (and a consumer seeing the new partitions),
    list_offsets max_timestamp, delete_consumer_groups."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import NewPartitions, OffsetSpec

    create_topic(bootstrap, topic)
    problems = []
    now = common.now_ms()
    stamps = [now - 3000, now - 1000, now - 2000]
    plan = [{"key": None, "value": f"v{i}".encode(), "headers": [], "timestamp": ts, "partition": 0} for i, ts in enumerate(stamps)]
    _, errors = produce_plan_records(bootstrap, topic, plan)
    if errors:
        return errors
    admin = AdminClient(conf(bootstrap))
    tp0 = TopicPartition(topic, 0)
    info = admin.list_offsets({tp0: OffsetSpec.max_timestamp()}, request_timeout=10)[tp0].result(timeout=15)
    if (info.offset, info.timestamp) != (1, stamps[1]):
        problems.append(f"max timestamp: ({info.offset}, {info.timestamp}), expected (1, {stamps[1]})")
    total = common.PARTITIONS + 2
    for f in admin.create_partitions([NewPartitions(topic, total)], operation_timeout=5, request_timeout=10).values():
        f.result(timeout=15)
    common.wait_for(lambda: len(partitions_of(admin, topic)) == total, common.DEADLINE_S, f"{topic} with {total} partitions in the metadata")
    try:
        for f in admin.create_partitions([NewPartitions(topic, total)], request_timeout=10).values():
            f.result(timeout=15)
        problems.append("create_partitions to the same count succeeded")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.INVALID_PARTITIONS:
            problems.append(f"create_partitions to the same count: {e}, expected INVALID_PARTITIONS")
    # The new partitions take records and serve them.
    last = [{"key": None, "value": b"on the new partition", "headers": [], "timestamp": None, "partition": total - 1}]
    delivered, errors = produce_plan_records(bootstrap, topic, last)
    problems += errors
    if delivered.get(b"on the new partition") != (total - 1, 0):
        problems.append(f"a record for partition {total - 1} was delivered at {delivered}")

    group = f"{topic}-admin"
    offsets = [TopicPartition(topic, 0, 2), TopicPartition(topic, total - 1, 1)]
    for f in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)], request_timeout=10).values():
        f.result(timeout=15)
    for g, f in admin.delete_consumer_groups([group], request_timeout=10).items():
        f.result(timeout=15)
    try:
        for f in admin.delete_consumer_groups([group], request_timeout=10).values():
            f.result(timeout=15)
        problems.append("deleting the group a second time succeeded")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
            problems.append(f"deleting the group a second time: {e}, expected GROUP_ID_NOT_FOUND")
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], request_timeout=10)
    left = [tp for f in res.values() for tp in f.result(timeout=15).topic_partitions if tp.offset >= 0]
    if left:
        problems.append(f"the deleted group still has offsets {left}")
    return problems


def scenario_topic_ids(bootstrap, topic):
    """Topic ids and a one-broker cluster's leader election: describe_topics gives the
    topic a non-zero id, a new one once it is deleted and created again; a consumer then
    reads only the new topic's record (librdkafka fetches by topic id where the broker
    serves it); elect_leaders answers ELECTION_NOT_NEEDED for a partition (its one replica
    leads) and UNKNOWN_TOPIC_OR_PART for one that does not exist."""
    from confluent_kafka import ElectionType, TopicCollection

    zero = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's all-zero id in its base64 form
    problems = []
    admin = AdminClient(conf(bootstrap))

    def topic_id():
        futures = admin.describe_topics(TopicCollection([topic]), request_timeout=10)
        return str(futures[topic].result(timeout=15).topic_id)

    def one_record(value):
        _, errors = produce_plan_records(
            bootstrap, topic, [{"key": None, "value": value, "headers": [], "timestamp": None, "partition": 0}]
        )
        problems.extend(errors)

    create_topic(bootstrap, topic, partitions=1)
    first = topic_id()
    if first in ("", "None", zero):
        problems.append(f"describe_topics: topic id {first!r}")
    one_record(b"before")
    wanted = {TopicPartition(topic, 0): None, TopicPartition(topic, 99): None}
    # No request_timeout: confluent-kafka 2.16.1 fails on any keyword here (SystemError);
    # each partition maps to a KafkaError or None.
    res = admin.elect_leaders(ElectionType.PREFERRED, list(wanted)).result(timeout=15)
    codes = {tp.partition: (err.code() if err is not None else None) for tp, err in res.items()}
    want = {0: KafkaError.ELECTION_NOT_NEEDED, 99: KafkaError.UNKNOWN_TOPIC_OR_PART}
    if codes != want:
        problems.append(f"elect_leaders: {codes}, expected {want}")
    for f in admin.delete_topics([topic], operation_timeout=5, request_timeout=10).values():
        f.result(timeout=15)
    create_topic(bootstrap, topic, partitions=1)
    second = topic_id()
    if second in ("", "None", zero, first):
        problems.append(f"the topic created again has id {second!r} (first {first!r})")
    one_record(b"after")
    got = [r["value"] for r in consume_all(bootstrap, topic, 1, partitions=1)]
    if got != [b"after"]:
        problems.append(f"consumed {got} from the topic created again, expected [b'after']")
    return problems


def scenario_compaction(bootstrap, topic):
    """A compacted topic (cleanup.policy=compact, small segments): 20 values for each of
    five keys, tombstones for two of them, then records of another key to roll the
    segments on. Once the broker's cleaner has run, a consumer from the start sees each
    of the five keys once, with its newest value (None for the deleted ones), at the
    offset the producer was told, and fewer records than were produced. A keyless record
    is refused with INVALID_RECORD."""
    admin = AdminClient(conf(bootstrap))
    config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=config)
    for f in admin.create_topics([new], operation_timeout=5, request_timeout=10).values():
        f.result(timeout=15)
    common.wait_for(lambda: len(partitions_of(admin, topic)) == 1, 10, f"metadata of {topic}")
    problems = []
    acked = {}
    refused = []

    def on_delivery(err, msg):
        if err is not None:
            (refused if msg.key() is None else problems).append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    p = Producer(conf(bootstrap, **{"linger.ms": 0}))
    for rnd in range(20):
        for k in range(5):
            p.produce(topic, key=f"key-{k}".encode(), value=f"v{rnd}".encode(), partition=0, on_delivery=on_delivery)
        p.flush(10)
    for k in (3, 4):
        p.produce(topic, key=f"key-{k}".encode(), value=None, partition=0, on_delivery=on_delivery)
    p.flush(10)
    # One batch at a time: a segment rolls between batches, never inside one, so the
    # records above end up in sealed segments, which are the ones the cleaner cleans.
    for i in range(60):
        p.produce(topic, key=b"filler", value=f"f{i}".encode(), partition=0, on_delivery=on_delivery)
        p.flush(10)
    p.produce(topic, value=b"no key", partition=0, on_delivery=on_delivery)
    p.flush(15)
    if problems:
        return [f"delivery failed: {e}" for e in problems]
    if len(refused) != 1 or refused[0].code() != KafkaError.INVALID_RECORD:
        problems.append(f"a keyless record on a compacted topic: {refused}, expected INVALID_RECORD")
    last = max(acked)
    newest = {}
    for o in sorted(acked):
        newest[acked[o][0]] = o

    def read():
        c = Consumer(conf(bootstrap, **CONSUMER, **{"group.id": f"{topic}-reader"}))
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        end = time.monotonic() + common.DEADLINE_S
        while time.monotonic() < end and (not out or out[-1][0] < last):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.key(), m.value()))
        c.close()
        return out

    def cleaned():
        got = read()
        return got if len([r for r in got if r[1].startswith(b"key-")]) == 5 else None

    got = common.wait_for(cleaned, common.DEADLINE_S, "the cleaner to leave one record of each key")
    for k in range(5):
        key = f"key-{k}".encode()
        left = [r for r in got if r[1] == key]
        want = None if k >= 3 else b"v19"
        if len(left) != 1 or left[0][0] != newest[key] or left[0][2] != want:
            problems.append(f"{key}: {left}, expected one record at {newest[key]} with {want}")
    for o, k, v in got:
        if acked.get(o) != (k, v):
            problems.append(f"offset {o} reads {(k, v)}, the producer was told {acked.get(o)}")
    if not len(got) < len(acked) or got[0][0] == 0:
        problems.append(f"{len(got)} of {len(acked)} records left, the first at {got[0][0]}: nothing was cleaned")
    return problems


def scenario_record_errors(bootstrap, topic):
    """librdkafka 2.15's test 0011 (KIP-467): one batch of 100 records to a compacted
    topic, every tenth without a key. The broker names the ten bad records, so exactly
    those fail with INVALID_RECORD and the other 90 with _INVALID_DIFFERENT_RECORD
    ("an invalid record in the same batch"); nothing is stored."""
    admin = AdminClient(conf(bootstrap))
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})
    for f in admin.create_topics([new], operation_timeout=5, request_timeout=10).values():
        f.result(timeout=15)
    common.wait_for(lambda: len(partitions_of(admin, topic)) == 1, 10, f"metadata of {topic}")
    errors = {}

    def on_delivery(err, msg):
        i = int(msg.value().decode().rsplit(" ", 1)[1])
        errors[i] = err.code() if err is not None else None

    # One batch: every record is queued before the linger time lets the first go.
    p = Producer(conf(bootstrap, **{"linger.ms": 1000, "message.timeout.ms": 10000}))
    for i in range(100):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        p.produce(topic, key=key, value=f"record {i}".encode(), partition=0, on_delivery=on_delivery)
    left = p.flush(common.DEADLINE_S)
    if left:
        return [f"{left} records not reported"]
    different = getattr(KafkaError, "_INVALID_DIFFERENT_RECORD", None)
    bad = sorted(i for i, e in errors.items() if e == KafkaError.INVALID_RECORD)
    others = [i for i, e in errors.items() if e == different]
    problems = []
    if bad != list(range(0, 100, 10)):
        problems.append(f"INVALID_RECORD for {bad}, expected the ten keyless records")
    if len(others) != 90:
        rest = sorted({str(e) for i, e in errors.items() if i % 10})
        problems.append(f"{len(others)} of the keyed records failed as _INVALID_DIFFERENT_RECORD, expected 90 (codes {rest})")
    c = Consumer(conf(bootstrap, **{"group.id": f"{topic}-w"}))
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    if hi != 0:
        problems.append(f"the refused batch left {hi - lo} records")
    return problems


def scenario_static_member(bootstrap, topic):
    """Static membership (KIP-345): two consumers with group.instance.id share
    the partitions; one closes (a static member does not leave) and a new
    consumer with its instance id gets the same partitions back at once, with
    no rebalance: the other member sees no revoke and no new assignment, and
    the group describes both instance ids."""
    create_topic(bootstrap, topic)
    group = f"{topic}-g"
    events = {"a": [], "b": []}

    def make(name):
        c = Consumer(conf(bootstrap, **{**CONSUMER, "group.id": group, "group.instance.id": name,
                                        "session.timeout.ms": 10000}))

        def on_assign(consumer, parts):
            events[name].append(("assign", sorted(tp.partition for tp in parts)))

        def on_revoke(consumer, parts):
            events[name].append(("revoke", sorted(tp.partition for tp in parts)))

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        return c

    def poll_until(consumers, done, what):
        deadline = time.monotonic() + common.DEADLINE_S
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.05)
            if done():
                return []
        return [f"timed out waiting for {what}: {events}"]

    def assigned(name):
        got = [e for e in events[name] if e[0] == "assign"]
        return got[-1][1] if got else None

    a, b = make("a"), make("b")
    problems = poll_until([a, b], lambda: assigned("a") and assigned("b")
                          and len(assigned("a")) + len(assigned("b")) == common.PARTITIONS,
                          "both members assigned")
    if problems:
        a.close()
        b.close()
        return problems
    before_a = list(events["a"])
    b_parts = assigned("b")
    b.close()  # static: no LeaveGroup
    events["b"].clear()
    started = time.monotonic()
    b2 = make("b")
    problems = poll_until([a, b2], lambda: assigned("b") is not None, "the restarted member's assignment")
    took = time.monotonic() - started
    # A little longer: a rebalance, had one started, would reach the other member now.
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        a.poll(0.05)
        b2.poll(0.05)
    if not problems:
        if assigned("b") != b_parts:
            problems.append(f"the restarted member got {assigned('b')}, it had {b_parts}")
        if events["a"] != before_a:
            problems.append(f"the other member saw a rebalance: {events['a'][len(before_a):]}")
        if took > 5:
            problems.append(f"the restarted member waited {took:.1f} s for its partitions")
        admin = AdminClient(conf(bootstrap))
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        ids = sorted(m.group_instance_id or "" for m in d.members)
        if ids != ["a", "b"]:
            problems.append(f"describe shows instance ids {ids}")
    a.close()
    b2.close()
    return problems


def scenario_delete_records(bootstrap, topic):
    """AdminClient.delete_records moves the log start (its low watermark): the watermarks
    follow, a consumer assigned below the start is reset to it (auto.offset.reset
    earliest) or told _AUTO_OFFSET_RESET (error); past the end is OFFSET_OUT_OF_RANGE;
    OFFSET_END deletes everything."""
    from confluent_kafka import OFFSET_END

    n, before = common.DELETE_RECORDS_COUNT, common.DELETE_RECORDS_BEFORE
    create_topic(bootstrap, topic, partitions=1)
    plan = [{"key": None, "value": f"r{i}".encode(), "headers": [], "timestamp": None, "partition": 0} for i in range(n)]
    delivered, errors = produce_plan_records(bootstrap, topic, plan)
    if errors or sorted(o for _, o in delivered.values()) != list(range(n)):
        return errors or [f"records delivered at {sorted(delivered.values())}, expected 0..{n - 1}"]
    admin = AdminClient(conf(bootstrap))

    def delete(offset):
        tp = TopicPartition(topic, 0, offset)
        return admin.delete_records([tp], request_timeout=10)[tp].result(timeout=15).low_watermark

    problems = []
    low = delete(before)
    if low != before:
        problems.append(f"delete_records before {before}: low watermark {low}")

    def first_read(reset):
        c = Consumer(conf(bootstrap, **{**CONSUMER, "group.id": f"{topic}-{reset}", "auto.offset.reset": reset}))
        try:
            marks = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            c.assign([TopicPartition(topic, 0, 1)])  # below the log start
            end = time.monotonic() + common.DEADLINE_S
            while time.monotonic() < end:
                m = c.poll(0.5)
                if m is not None:
                    return marks, m
            return marks, None
        finally:
            c.close()

    marks, m = first_read("earliest")
    if marks != (before, n):
        problems.append(f"watermarks {marks}, expected ({before}, {n})")
    if m is None or m.error() is not None or (m.offset(), m.value()) != (before, f"r{before}".encode()):
        problems.append(f"from offset 1 with earliest: {m and (m.error() or (m.offset(), m.value()))}, expected r{before} at {before}")
    _, m = first_read("error")
    if m is None or m.error() is None or m.error().code() != KafkaError._AUTO_OFFSET_RESET:
        problems.append(f"from offset 1 with auto.offset.reset=error: {m and (m.error() or m.offset())}, expected _AUTO_OFFSET_RESET")
    try:
        delete(n + 1)
        problems.append(f"delete_records before {n + 1}, past the end {n}, succeeded")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.OFFSET_OUT_OF_RANGE:
            problems.append(f"delete_records past the end: {e}, expected OFFSET_OUT_OF_RANGE")
    low = delete(OFFSET_END)
    if low != n:
        problems.append(f"delete_records of everything (OFFSET_END): low watermark {low}, expected {n}")
    return problems


def cli_sees_open_transaction(bootstrap, tid, topic):
    """`flume-cli transactions list` (when run.sh started the broker) shows
    the open transaction `tid` over both protocols: Ongoing, on partitions 0
    and 1 of `topic`, and kept by `--min-age-ms 0` (open now)."""
    cli, native = os.environ.get("FLUME_CLI"), os.environ.get("FLUME_NATIVE")
    if not cli or not native:
        return []
    problems = []
    for broker in (native, f"kafka://{bootstrap}"):
        out = subprocess.run([cli, "transactions", "list", "--state", "Ongoing", "--min-age-ms", "0",
                              "--broker", broker], capture_output=True, text=True, timeout=30)
        rows = [line.split() for line in out.stdout.splitlines()[1:]]
        mine = [r for r in rows if r and r[0] == tid]
        if out.returncode != 0 or len(mine) != 1:
            problems.append(f"flume-cli transactions list --broker {broker}: exit {out.returncode}, "
                            f"{out.stdout!r} {out.stderr!r}")
        elif mine[0][3] != "Ongoing" or mine[0][-1] != f"{topic}/0,1":
            problems.append(f"flume-cli transactions list --broker {broker}: {mine[0]}")
    return problems


def scenario_transactions(bootstrap, topic):
    """Kafka transactions (KIP-98, KIP-447) with a transactional producer:
    committed and aborted transactions, read back by a read_committed consumer
    (only the committed records, in order) and a read_uncommitted one (every
    record); send_offsets_to_transaction commits a group's offset with the
    transaction; a second producer with the same transactional.id fences the
    first, whose next transaction fails."""
    create_topic(bootstrap, topic)
    group = f"{topic}-g"
    tid = f"{topic}-tx"
    problems = []

    def producer():
        p = Producer(conf(bootstrap, **{"transactional.id": tid, "transaction.timeout.ms": 30000}))
        p.init_transactions(common.DEADLINE_S)
        return p

    def send(p, values, partition):
        for v in values:
            p.produce(topic, v.encode(), key=b"k", partition=partition)

    p1 = producer()
    p1.begin_transaction()
    send(p1, [f"c1-{i}" for i in range(10)], 0)
    send(p1, ["c1-p1"], 1)
    p1.commit_transaction(common.DEADLINE_S)
    p1.begin_transaction()
    send(p1, [f"ab-{i}" for i in range(5)], 0)
    send(p1, ["ab-p1"], 1)
    p1.flush(common.DEADLINE_S)  # stored, then aborted
    problems += cli_sees_open_transaction(bootstrap, tid, topic)
    p1.abort_transaction(common.DEADLINE_S)
    # A transaction that also commits a group's offset (consume-transform-produce).
    c = Consumer(conf(bootstrap, **{**CONSUMER, "group.id": group}))
    p1.begin_transaction()
    send(p1, [f"c2-{i}" for i in range(3)], 0)
    p1.send_offsets_to_transaction([TopicPartition(topic, 2, 7)], c.consumer_group_metadata(), common.DEADLINE_S)
    p1.commit_transaction(common.DEADLINE_S)
    got = c.committed([TopicPartition(topic, 2)], timeout=10)
    if got[0].offset != 7:
        problems.append(f"the transaction's group offset: {got[0].offset}, expected 7")
    c.close()

    def read(isolation, want):
        r = Consumer(conf(bootstrap, **{**CONSUMER, "group.id": f"{topic}-{isolation}", "isolation.level": isolation}))
        r.assign([TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, OFFSET_BEGINNING)])
        out = {0: [], 1: []}
        deadline = time.monotonic() + common.DEADLINE_S
        while time.monotonic() < deadline and sum(map(len, out.values())) < want:
            m = r.poll(0.2)
            if m is not None and m.error() is None:
                out[m.partition()].append(m.value().decode())
        # A little longer: nothing more may come.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = r.poll(0.1)
            if m is not None and m.error() is None:
                out[m.partition()].append(m.value().decode())
        r.close()
        return out

    committed = read("read_committed", 14)
    want = {0: [f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(3)], 1: ["c1-p1"]}
    if committed != want:
        problems.append(f"read_committed read {committed}, expected {want}")
    everything = read("read_uncommitted", 20)
    want_all = {0: [f"c1-{i}" for i in range(10)] + [f"ab-{i}" for i in range(5)] + [f"c2-{i}" for i in range(3)],
                1: ["c1-p1", "ab-p1"]}
    if everything != want_all:
        problems.append(f"read_uncommitted read {everything}, expected {want_all}")

    # A zombie: a new producer with the transactional.id fences the old one.
    p2 = producer()
    try:
        p1.begin_transaction()
        send(p1, ["zombie"], 0)
        p1.commit_transaction(10)
        problems.append("the fenced producer committed a transaction")
    except KafkaException as e:
        err = e.args[0]
        if not (err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)):
            problems.append(f"the fenced producer got {err}, expected a fatal fencing error")
    p2.begin_transaction()
    send(p2, ["after-fence"], 1)
    p2.commit_transaction(common.DEADLINE_S)
    last = read("read_committed", 15)
    if "zombie" in last[0] or last[1][-1:] != ["after-fence"]:
        problems.append(f"after fencing, read_committed read {last}")
    return problems


def main():
    if sys.argv[1] == "member":
        member(*sys.argv[2:5])
        return 0
    bootstrap, prefix, logdir = sys.argv[1:4]
    pre = f"{prefix}-cf"
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
    rep.run("topic-configs", scenario_topic_configs, bootstrap, f"{pre}-cfg")
    for codec in CODECS:
        rep.run(f"compression-{codec}", scenario_compression, bootstrap, f"{pre}-z{codec}", codec)
    rep.run("admin", scenario_admin, bootstrap, f"{pre}-adm")
    rep.run("topic-ids", scenario_topic_ids, bootstrap, f"{pre}-ids")
    rep.run("compaction", scenario_compaction, bootstrap, f"{pre}-cmp", timeout=3 * common.DEADLINE_S)
    rep.run("record-errors", scenario_record_errors, bootstrap, f"{pre}-rerr")
    rep.run("static-member", scenario_static_member, bootstrap, f"{pre}-static", timeout=3 * common.DEADLINE_S)
    rep.run("delete-records", scenario_delete_records, bootstrap, f"{pre}-del")
    rep.run("transactions", scenario_transactions, bootstrap, f"{pre}-txn", timeout=3 * common.DEADLINE_S)
    rep.finish()


if __name__ == "__main__":
    sys.exit(main())
