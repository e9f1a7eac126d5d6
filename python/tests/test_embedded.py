"""flume.EmbeddedBroker: keys, headers, timestamps, batches, errors, threads."""

from __future__ import annotations

import threading

import pytest

import flume


def test_records_keep_key_headers_and_timestamp(tmp_path):
    with flume.EmbeddedBroker(tmp_path / "d") as b:
        assert b.create_topic("t", 3) is True
        assert b.create_topic("t", 3, exist_ok=True) is False
        with pytest.raises(flume.TopicAlreadyExists):
            b.create_topic("t", 3)
        m = b.produce("t", b"value", b"key", headers=[("trace", b"abc"), ("n", "1")], timestamp=1234)
        assert (m.partition, m.offset) == tuple(m)
        b.join_group("t", "g", "c")
        r = b.poll("t", "g", "c", timeout=1)
        assert r is not None
        assert (r.topic, r.partition, r.offset) == ("t", m.partition, 0)
        assert (r.key, r.value, r.timestamp) == (b"key", b"value", 1234)
        assert r.headers == [("trace", b"abc"), ("n", b"1")]
        assert b.topic_config("t")["partitions"] == 3
    assert b.closed
    with pytest.raises(flume.Closed):
        b.produce("t", b"x")


def test_produce_many_and_poll_many(tmp_path):
    with flume.EmbeddedBroker(tmp_path / "d") as b:
        b.create_topic("t", 2)
        keys = [b"a" if i % 2 else b"b" for i in range(1000)]
        metas = b.produce_many("t", [str(i).encode() for i in range(1000)], keys=keys)
        assert len(metas) == 1000
        per_partition: dict = {}
        for m in metas:
            per_partition.setdefault(m.partition, []).append(m.offset)
        for offsets in per_partition.values():
            assert offsets == list(range(len(offsets)))
        b.join_group("t", "g", "c")
        seen = []
        while True:
            batch = b.poll_many("t", "g", "c", max_records=128)
            if not batch:
                break
            last = {}
            for r in batch:
                seen.append(int(r.value))
                last[r.partition] = r.offset
            for p, o in last.items():
                b.commit("t", "g", p, o)
        assert sorted(seen) == list(range(1000))
        assert b.lag("t", "g") == {0: 0, 1: 0}
        assert b.committed("g", "t", 0) == b.offsets("t")[0][1]


def test_errors_are_flume_errors(tmp_path):
    with flume.EmbeddedBroker(tmp_path / "d", auto_create_topics=False, max_record_bytes=1024) as b:
        with pytest.raises(flume.UnknownTopic) as e:
            b.produce("missing", b"x")
        assert isinstance(e.value, flume.FlumeError)
        with pytest.raises(flume.InvalidName):
            b.create_topic("bad/name")
        b.create_topic("t")
        with pytest.raises(flume.RecordTooLarge):
            b.produce("t", b"x" * 4096)
        with pytest.raises(flume.UnknownPartition):
            b.commit("t", "g", 7, 0)
        with pytest.raises(TypeError):
            b.produce("t", 12)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            b.poll("t", "g", "c", timeout=-1)


def test_threads_produce_and_poll_in_parallel(tmp_path):
    with flume.EmbeddedBroker(tmp_path / "d") as b:
        b.create_topic("t", 4)
        n, producers = 300, 4
        b.join_group("t", "g", "c")
        seen = []

        def produce(i):
            for j in range(n):
                b.produce("t", f"{i}-{j}".encode(), key=str(j).encode())

        def consume():
            while len(seen) < n * producers:
                r = b.poll("t", "g", "c", timeout=5)
                assert r is not None
                seen.append(r.value)
                b.commit("t", "g", r.partition, r.offset)

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
        threads.append(threading.Thread(target=consume))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(set(seen)) == n * producers


def test_reopen_restores_records_and_offsets(tmp_path):
    b = flume.EmbeddedBroker(tmp_path / "d")
    b.create_topic("t", 1)
    b.produce_many("t", [b"1", b"2", b"3"])
    b.join_group("t", "g", "c")
    b.commit("t", "g", 0, 0)
    b.close()
    b.close()  # idempotent
    b = flume.EmbeddedBroker(tmp_path / "d")
    b.join_group("t", "g", "c")
    assert b.lag("t", "g") == {0: 2}
    assert b.poll("t", "g", "c").value == b"2"
    b.close()


def test_a_null_value_reads_back_as_none(tmp_path):
    with flume.EmbeddedBroker(tmp_path / "d") as b:
        b.create_topic("t", 1)
        b.produce("t", None, b"k", headers={"h": None})
        b.produce_many("t", [b"", None], keys=[b"k", b"k"])
        b.join_group("t", "g", "c")
        got = b.poll_many("t", "g", "c", max_records=10)
        assert [r.value for r in got] == [None, b"", None]
        assert got[0].headers == [("h", None)]
