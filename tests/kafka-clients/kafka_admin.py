#!/usr/bin/env python3
"""Small Kafka-protocol admin steps for the kcat scenarios in run.sh (kcat has no
CreateTopics or OffsetFetch of its own). Uses confluent-kafka from the harness venv.

    kafka_admin.py create BOOTSTRAP TOPIC PARTITIONS
    kafka_admin.py wait-committed BOOTSTRAP GROUP TOPIC PARTITIONS OFFSET DEADLINE_S
        waits until the group's committed offset is OFFSET on every partition
"""

import sys
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BASE = {"socket.timeout.ms": 5000, "socket.connection.setup.timeout.ms": 5000}


def create(bootstrap, topic, partitions):
    a = AdminClient({"bootstrap.servers": bootstrap, **BASE})
    fs = a.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)], request_timeout=10)
    for f in fs.values():
        f.result(timeout=15)


def wait_committed(bootstrap, group, topic, partitions, offset, deadline_s):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **BASE})
    want = {p: int(offset) for p in range(int(partitions))}
    end = time.monotonic() + float(deadline_s)
    got = None
    try:
        while time.monotonic() < end:
            tps = c.committed([TopicPartition(topic, p) for p in range(int(partitions))], timeout=5)
            got = {tp.partition: tp.offset for tp in tps}
            if got == want:
                return
            time.sleep(0.1)
    finally:
        c.close()
    print(f"committed offsets {got}, expected {offset} on every partition (after {deadline_s}s)")
    sys.exit(1)


if __name__ == "__main__":
    {"create": create, "wait-committed": wait_committed}[sys.argv[1]](*sys.argv[2:])
