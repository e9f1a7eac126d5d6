import os
from nanokafka import NanoKafka

def test_basic_produce_consume(tmp_path):
    data_dir = tmp_path / "data"

    broker = NanoKafka()
    broker.create_topic("test", num_partitions=1)

    broker.produce("test", "hello")

    broker.join_group("test", "group1", "consumer1")

    p, (offset, msg) = broker.poll("test", "group1", "consumer1")

    assert msg == "hello"

    broker.commit("test", "group1", p, offset)

    assert broker.lag("test", "group1")[0] == 0
