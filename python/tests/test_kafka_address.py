"""The network classes on a ``kafka://`` address: the same program against a
Flume broker's own protocol and against its Kafka listener (any Kafka cluster
takes the same address form), only the address changing."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest

import flume
import flume.aio


@pytest.fixture
def broker(tmp_path) -> Iterator["flume.Broker"]:
    """A Flume broker in this process with a Kafka listener, both on free ports;
    new Kafka groups form at once (no initial rebalance delay)."""
    b = flume.Broker.start(
        tmp_path / "broker-data",
        port=0,
        default_partitions=2,
        kafka_port=0,
        group_initial_rebalance_delay_ms=0,
    )
    try:
        yield b
    finally:
        b.shutdown()


def program(addr: str, topic: str) -> dict:
    """An application: create a topic, produce keyed records, read one
    partition, consume as a group with manual commits, check the lag."""
    admin = flume.Admin(addr)
    admin.create_topic(topic, 2)
    with pytest.raises(flume.TopicAlreadyExists):
        admin.create_topic(topic, 2)
    with flume.Producer(addr) as p:
        m = p.send(topic, b"hello", key=b"user-1", headers={"h": b"v"}, timestamp=99)
        metas = p.send_many(topic, [b"a", b"b", b"c"], keys=[b"user-1"] * 3)
        other = p.send(topic, b"other", key=b"user-2")
    assert [x.partition for x in metas] == [m.partition] * 3
    assert [x.offset for x in metas] == [m.offset + 1, m.offset + 2, m.offset + 3]
    assert admin.describe([topic])[topic][m.partition] == (0, 4)
    assert topic in admin.topics()

    with flume.PartitionConsumer(addr, topic, m.partition, start="earliest") as pc:
        r = pc.poll(timeout=5)
        assert r is not None
        assert (r.key, r.value, r.timestamp, r.headers) == (b"user-1", b"hello", 99, [("h", b"v")])
        assert [pc.poll(timeout=5).value for _ in range(3)] == [b"a", b"b", b"c"]
        assert pc.poll(timeout=0.05) is None
        assert pc.position == 4

    with flume.GroupConsumer(addr, "billing", topic, auto_commit=False) as gc:
        got = []
        for record in gc:
            got.append(record.value)
            gc.commit(record)
            if len(got) == 5:
                break
        assert sorted(got) == [b"a", b"b", b"c", b"hello", b"other"]
        assert sorted(p for _, p in gc.assignment()) == [0, 1]
    assert admin.lag("billing", topic) == {0: 0, 1: 0}
    assert admin.committed("billing", topic)[m.partition] == 4
    return {b"user-1": m.partition, b"user-2": other.partition}


def test_the_same_program_over_both_protocols(broker):
    assert broker.kafka_address == f"kafka://127.0.0.1:{broker.kafka_address.rsplit(':', 1)[1]}"
    flume_routes = program(broker.address, "orders")
    kafka_routes = program(broker.kafka_address, "orders-k")
    # FNV-1a by default over Kafka: keys land where they do on Flume.
    assert kafka_routes == flume_routes


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), unsigned."""
    m, h = 0x5BD1E995, 0x9747B28C ^ len(data)
    for i in range(0, len(data) - len(data) % 4, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[len(data) - len(data) % 4 :]
    if tail:
        h = ((h ^ int.from_bytes(tail, "little")) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def test_kafka_settings_and_interop(broker):
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF  # the Java client's own test value
    kafka = broker.kafka_address
    flume.Admin(kafka).create_topic("zipped", 4)
    keys = [f"key-{i}".encode() for i in range(16)]
    with flume.Producer(kafka, compression="zstd", acks=1, partitioner="murmur2", linger_ms=5) as p:
        metas = p.send_many("zipped", [b"v" + k for k in keys], keys=keys)
    assert [m.partition for m in metas] == [(murmur2(k) & 0x7FFFFFFF) % 4 for k in keys]
    with flume.Producer(kafka, compression="lz4", acks="all") as p:
        over_kafka = p.send("zipped", b"fnv", key=b"key-1")
    with flume.Producer(broker.address) as p:
        over_flume = p.send("zipped", b"flume", key=b"key-1")
    assert over_kafka.partition == over_flume.partition
    # Compressed batches written over Kafka read back over Flume's own protocol.
    with flume.PartitionConsumer(broker.address, "zipped", metas[0].partition) as pc:
        first = pc.poll(timeout=5)
    assert (first.key, first.value) == (keys[0], b"vkey-0")
    with pytest.raises(ValueError, match="murmur2"):
        flume.Producer(broker.address, partitioner="murmur2")  # a Flume broker routes by FNV-1a
    for bad in [
        {"compression": "brotli"},
        {"acks": 2},
        {"partitioner": "crc32"},
        {"acks": 1, "idempotence": True},  # an idempotent producer needs acks "all"
    ]:
        with pytest.raises(ValueError):
            flume.Producer(kafka, **bad)


def test_kafka_errors(broker):
    kafka = broker.kafka_address
    admin = flume.Admin(kafka)
    with pytest.raises(flume.UnknownTopic):
        admin.describe(["missing"])
    with pytest.raises(flume.InvalidName):
        admin.create_topic("bad name")
    # Flume's own queue settings have no Kafka topic config: refused, not dropped.
    with pytest.raises(ValueError, match="Flume's own"):
        admin.create_topic("queued", 1, backpressure="reject")
    with pytest.raises(flume.ConnectionFailed):
        flume.Producer("kafka://127.0.0.1:1")
    with pytest.raises(ValueError):
        flume.Admin("kafka://no-port")
    with pytest.raises(ValueError):
        flume.Admin("http://127.0.0.1:1")


def test_asyncio_over_kafka(broker):
    kafka = broker.kafka_address

    async def main():
        admin = await flume.aio.Admin.connect(kafka)
        await admin.create_topic("aio", 1)
        async with await flume.aio.Producer.connect(kafka, compression="lz4") as p:
            first = await p.send("aio", b"r0")
            rest = await asyncio.gather(*(p.send("aio", f"r{i}".encode(), key=b"k") for i in range(1, 5)))
        assert first.offset == 0 and sorted(m.offset for m in rest) == [1, 2, 3, 4]
        got = []
        async with await flume.aio.GroupConsumer.connect(kafka, "g", ["aio"], auto_commit=False) as c:
            async for record in c:
                got.append(record.value)
                await c.commit(record)
                if len(got) == 5:
                    break
            # A cancelled poll leaves the consumer usable.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.poll(), timeout=0.1)
        assert sorted(got) == sorted(f"r{i}".encode() for i in range(5))
        assert await admin.lag("g", "aio") == {0: 0}
        async with await flume.aio.PartitionConsumer.connect(kafka, "aio", 0, start=3) as pc:
            assert (await pc.poll()).value == b"r3"

    asyncio.run(main())
