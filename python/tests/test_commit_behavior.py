def test_no_commit_reprocess(tmp_path):
    broker = NanoKafka()
    broker.create_topic("test")

    broker.produce("test", "data")

    broker.join_group("test", "g1", "c1")

    p, (offset, msg) = broker.poll("test", "g1", "c1")

    # Do NOT commit

    p2, (offset2, msg2) = broker.poll("test", "g1", "c1")

    assert offset == offset2
