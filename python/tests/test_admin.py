"""Admin over the network: topic configs by Kafka's names, DeleteRecords,
CreatePartitions, a group's offsets; against a broker this test starts in-process."""

from __future__ import annotations

import asyncio

import pytest

import flume
import flume.aio


def test_topic_configs_by_kafka_names(tcp_broker):
    admin = flume.Admin(tcp_broker.address)
    admin.create_topic(
        "changelog",
        1,
        configs={"cleanup.policy": "compact", "retention.ms": 3_600_000, "unclean.leader.election.enable": False},
    )
    got = admin.describe_configs("changelog")
    assert got["cleanup.policy"] == ("compact", "topic")
    assert got["retention.ms"] == ("3600000", "topic")
    assert got["unclean.leader.election.enable"] == ("false", "topic")
    assert got["delete.retention.ms"] == ("86400000", "default")
    assert admin.describe(["changelog"])["changelog"] == {0: (0, 0)}

    # SET one, DELETE (back to the default) another; the rest stay as they are.
    after = admin.alter_configs("changelog", {"retention.ms": "1000", "segment.bytes": 1 << 20})
    assert after["retention.ms"] == ("1000", "topic")
    assert after["segment.bytes"] == ("1048576", "topic")
    after = admin.alter_configs("changelog", delete=["segment.bytes"])
    assert after["segment.bytes"][1] == "default"
    assert after["cleanup.policy"] == ("compact", "topic")
    assert admin.describe_configs("changelog") == after

    with pytest.raises(flume.InvalidConfig, match="shred") as bad:
        admin.alter_configs("changelog", {"cleanup.policy": "shred"})
    assert isinstance(bad.value, flume.InvalidRequest)
    assert bad.value.code == 21
    assert admin.describe_configs("changelog")["cleanup.policy"] == ("compact", "topic")
    with pytest.raises(flume.InvalidConfig, match="no.such.config"):
        admin.create_topic("other", 1, configs={"no.such.config": "1"})
    assert "other" not in admin.topics()
    with pytest.raises(ValueError, match="configs="):
        admin.create_topic("other", 1, configs={"cleanup.policy": "compact"}, retention_ms=1000)
    with pytest.raises(ValueError, match="must be a str"):
        admin.alter_configs("changelog", {"retention.ms": [1]})
    with pytest.raises(flume.UnknownTopic):
        admin.describe_configs("missing")
    with pytest.raises(flume.TopicAlreadyExists):
        admin.create_topic("changelog", 1, configs={})


def test_a_compacted_topic_refuses_a_record_without_a_key(tcp_broker):
    addr = tcp_broker.address
    flume.Admin(addr).create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
    with flume.Producer(addr) as p:
        p.send("compacted", b"kept", key=b"k")
        with pytest.raises(flume.InvalidRecord):
            p.send("compacted", b"no key")


def test_delete_records_moves_the_log_start(tcp_broker):
    addr = tcp_broker.address
    admin = flume.Admin(addr)
    admin.create_topic("events", 1)
    with flume.Producer(addr) as p:
        p.send_many("events", [f"r{i}".encode() for i in range(10)], partition=0)
    assert admin.delete_records("events", 0, before=4) == 4
    assert admin.describe(["events"])["events"][0] == (4, 10)
    # A start below the log start is out of range; "earliest" is the new start.
    with flume.PartitionConsumer(addr, "events", 0, start=2) as pc:
        with pytest.raises(flume.OffsetOutOfRange):
            pc.poll(timeout=5)
    with flume.PartitionConsumer(addr, "events", 0, start="earliest") as pc:
        first = pc.poll(timeout=5)
        assert (first.offset, first.value) == (4, b"r4")
    # Below the start: it stays; past the end: refused; None: every record.
    assert admin.delete_records("events", 0, before=1) == 4
    with pytest.raises(flume.OffsetOutOfRange):
        admin.delete_records("events", 0, before=11)
    with pytest.raises(flume.UnknownPartition):
        admin.delete_records("events", 7, before=1)
    assert admin.delete_records("events", 0) == 10
    assert admin.describe(["events"])["events"][0] == (10, 10)


def test_create_partitions(tcp_broker):
    admin = flume.Admin(tcp_broker.address)
    admin.create_topic("grow", 2)
    assert admin.create_partitions("grow", 6, validate_only=True) == 2
    assert sorted(admin.describe(["grow"])["grow"]) == [0, 1]
    assert admin.create_partitions("grow", 4) == 2
    assert sorted(admin.describe(["grow"])["grow"]) == [0, 1, 2, 3]
    with pytest.raises(flume.InvalidRequest):
        admin.create_partitions("grow", 4)
    with pytest.raises(flume.UnknownTopic):
        admin.create_partitions("missing", 4)
    with flume.Producer(tcp_broker.address) as p:
        assert tuple(p.send("grow", b"on a new partition", partition=3)) == (3, 0)


def test_delete_group_offsets_and_the_group(tcp_broker):
    addr = tcp_broker.address
    admin = flume.Admin(addr)
    admin.create_topic("orders", 2)
    with flume.Producer(addr) as p:
        p.send("orders", b"a", partition=0)
        p.send("orders", b"b", partition=1)
    with flume.GroupConsumer(addr, "billing", "orders", auto_commit=False) as gc:
        for _ in range(2):
            gc.commit(gc.poll(timeout=5))
        # A member reads the topic: its offsets stay.
        with pytest.raises(flume.GroupNotEmpty):
            admin.delete_group_offsets("billing", "orders")
        with pytest.raises(flume.GroupNotEmpty):
            admin.delete_group("billing")
    assert admin.committed("billing", "orders") == {0: 1, 1: 1}
    assert admin.delete_group_offsets("billing", "orders", [1]) == [1]
    assert admin.committed("billing", "orders") == {0: 1, 1: None}
    with pytest.raises(flume.UnknownPartition, match="partition 9"):
        admin.delete_group_offsets("billing", "orders", [9])
    assert admin.delete_group("billing") == 1
    assert admin.committed("billing", "orders") == {0: None, 1: None}
    with pytest.raises(flume.UnknownGroup):
        admin.delete_group("billing")
    with pytest.raises(flume.UnknownGroup):
        admin.delete_group_offsets("billing", "orders")


def test_admin_asyncio(tcp_broker):
    addr = tcp_broker.address

    async def main():
        admin = await flume.aio.Admin.connect(addr)
        await admin.create_topic("aio-cfg", 1, configs={"cleanup.policy": "compact"})
        assert (await admin.describe_configs("aio-cfg"))["cleanup.policy"] == ("compact", "topic")
        after = await admin.alter_configs("aio-cfg", {"retention.ms": 5000}, delete=["cleanup.policy"])
        assert after["retention.ms"] == ("5000", "topic")
        assert after["cleanup.policy"] == ("delete", "default")
        async with await flume.aio.Producer.connect(addr) as p:
            await p.send_many("aio-cfg", [b"x", b"y", b"z"])
        assert await admin.delete_records("aio-cfg", 0, 2) == 2
        assert await admin.create_partitions("aio-cfg", 3) == 1
        async with await flume.aio.GroupConsumer.connect(addr, "g", ["aio-cfg"], auto_commit=False) as c:
            await c.commit(await c.poll())
        assert await admin.delete_group_offsets("g", "aio-cfg") == [0, 1, 2]
        with pytest.raises(flume.UnknownGroup):
            await admin.delete_group("g")

    asyncio.run(main())
