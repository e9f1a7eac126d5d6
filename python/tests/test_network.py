"""The network SDK against a broker this test starts in-process."""

from __future__ import annotations

import asyncio

import pytest

import flume
import flume.aio


def test_produce_and_consume_blocking(tcp_broker):
    addr = tcp_broker.address
    admin = flume.Admin(addr)
    admin.create_topic("orders", 2)
    with pytest.raises(flume.TopicAlreadyExists):
        admin.create_topic("orders", 2)
    with flume.Producer(addr) as p:
        m = p.send("orders", b"hello", key=b"user-1", headers={"h": b"v"}, timestamp=99)
        metas = p.send_many("orders", [b"a", b"b", b"c"], keys=[b"user-1"] * 3)
    assert [x.partition for x in metas] == [m.partition] * 3
    assert [x.offset for x in metas] == [m.offset + 1, m.offset + 2, m.offset + 3]
    assert admin.describe(["orders"])["orders"][m.partition] == (0, 4)
    assert "orders" in admin.topics()

    with flume.PartitionConsumer(addr, "orders", m.partition, start="earliest") as pc:
        r = pc.poll(timeout=5)
        assert r is not None
        assert (r.key, r.value, r.timestamp, r.headers) == (b"user-1", b"hello", 99, [("h", b"v")])
        assert [pc.poll(timeout=5).value for _ in range(3)] == [b"a", b"b", b"c"]
        assert pc.poll(timeout=0.05) is None
        assert pc.position == 4

    with flume.GroupConsumer(addr, "billing", "orders", auto_commit=False) as gc:
        got = []
        for record in gc:
            got.append(record.value)
            gc.commit(record)
            if len(got) == 4:
                break
        assert sorted(got) == [b"a", b"b", b"c", b"hello"]
        assert sorted(p for _, p in gc.assignment()) == [0, 1]
    assert admin.lag("billing", "orders") == {0: 0, 1: 0}
    assert admin.committed("billing", "orders")[m.partition] == 4


def test_errors_over_the_network(tcp_broker):
    with pytest.raises(flume.ConnectionFailed):
        flume.Producer("127.0.0.1:1")
    admin = flume.Admin(tcp_broker.address)
    with pytest.raises(flume.InvalidName):
        admin.create_topic("bad name")
    with pytest.raises(flume.UnknownTopic):
        admin.describe(["missing"])


def test_asyncio(tcp_broker):
    addr = tcp_broker.address

    async def main():
        admin = await flume.aio.Admin.connect(addr)
        await admin.create_topic("aio", 1)
        async with await flume.aio.Producer.connect(addr) as p:
            first = await p.send("aio", b"r0")
            rest = await asyncio.gather(*(p.send("aio", f"r{i}".encode(), key=b"k") for i in range(1, 5)))
            await p.send_many("aio", [b"r5", b"r6"])
        assert first.offset == 0 and len(rest) == 4
        got = []
        async with await flume.aio.GroupConsumer.connect(addr, "g", ["aio"], auto_commit=False) as c:
            async for record in c:
                got.append(record.value)
                await c.commit(record)
                if len(got) == 7:
                    break
            # A poll that is cancelled (nothing more to read) leaves the consumer usable.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.poll(), timeout=0.1)
        assert sorted(got) == sorted(f"r{i}".encode() for i in range(7))
        assert await admin.lag("g", "aio") == {0: 0}
        async with await flume.aio.PartitionConsumer.connect(addr, "aio", 0, start=5) as pc:
            assert (await pc.poll()).value == b"r5"
        described = await admin.describe()
        assert described["aio"][0] == (0, 7)

    asyncio.run(main())


def test_broker_restart_keeps_data(tmp_path):
    b = flume.Broker.start(tmp_path / "d", port=0)
    with flume.Producer(b.address) as p:
        p.send("t", b"kept", partition=0)
    b.shutdown()
    b.shutdown()
    with flume.Broker.start(tmp_path / "d", port=0) as b2:
        with flume.PartitionConsumer(b2.address, "t", 0) as pc:
            assert pc.poll(timeout=5).value == b"kept"


def test_null_values_and_null_headers_are_none_not_empty(tcp_broker):
    addr = tcp_broker.address
    flume.Admin(addr).create_topic("changelog", 1)
    with flume.Producer(addr) as p:
        p.send("changelog", None, key=b"k", headers=[("gone", None), ("empty", b"")])
        p.send("changelog", b"", key=b"k")
    with flume.PartitionConsumer(addr, "changelog", 0, start="earliest") as pc:
        tomb, empty = pc.poll(timeout=5), pc.poll(timeout=5)
    assert (tomb.key, tomb.value, tomb.headers) == (b"k", None, [("gone", None), ("empty", b"")])
    assert "value=None" in repr(tomb)
    assert empty.value == b""
