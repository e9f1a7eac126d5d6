def test_retention(tmp_path):
    broker = NanoKafka()
    broker.create_topic("test", retention_size=2)

    broker.produce("test", 1)
    broker.produce("test", 2)
    broker.produce("test", 3)

    broker.join_group("test", "g1", "c1")

    p, (offset, msg) = broker.poll("test", "g1", "c1")

    broker.commit("test", "g1", p, offset)

    lag = broker.lag("test", "g1")

    assert isinstance(lag, dict)
