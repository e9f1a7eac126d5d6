"""Flume for Python: the embedded engine, the network SDK and an in-process broker.

Embedded (no network)::

    import flume
    with flume.EmbeddedBroker("./data") as b:
        b.create_topic("orders", partitions=2, exist_ok=True)
        b.produce("orders", b'{"id": 1}', key=b"user-1")
        b.join_group("orders", "billing", "worker-1")
        r = b.poll("orders", "billing", "worker-1", timeout=1.0)
        if r is not None:
            b.commit("orders", "billing", r.partition, r.offset)

Network SDK (blocking; ``flume.aio`` has the asyncio form)::

    with flume.Broker.start("./broker-data") as broker:      # or a running flume-cli broker
        with flume.Producer(broker.address) as p:
            p.send("orders", b"hello", key=b"user-1")
        with flume.GroupConsumer(broker.address, "billing", "orders") as c:
            record = c.poll(timeout=5.0)

Admin (topics, configs by Kafka's names, partitions, records, groups' offsets)::

    admin = flume.Admin(broker.address)
    admin.create_topic("changelog", 3, configs={"cleanup.policy": "compact"})
    admin.describe_configs("changelog")["cleanup.policy"]   # ("compact", "topic")
    admin.alter_configs("changelog", {"retention.ms": 3_600_000}, delete=["segment.bytes"])
    admin.delete_records("orders", 0, before=1000)          # the new log start
    admin.create_partitions("orders", 6)
    admin.delete_group_offsets("billing", "orders")

Every error is a ``flume.FlumeError`` subclass (``QueueFull``, ``RecordTooLarge``,
``UnknownTopic``, ``InvalidConfig``, ...). Blocking calls release the GIL while they do I/O or wait.
"""

from __future__ import annotations

from ._flume import (
    Admin,
    Broker,
    BufferFull,
    Closed,
    ConnectionFailed,
    CorruptRecord,
    EmbeddedBroker,
    FlumeError,
    GroupConsumer,
    GroupNotEmpty,
    InvalidConfig,
    InvalidName,
    InvalidRecord,
    InvalidRequest,
    OffsetOutOfRange,
    PartitionConsumer,
    Producer,
    QueueFull,
    RebalanceInProgress,
    Record,
    RecordMetadata,
    RecordTooLarge,
    ShuttingDown,
    StorageError,
    TopicAlreadyExists,
    UnknownGroup,
    UnknownMember,
    UnknownPartition,
    UnknownTopic,
)

from . import aio

__all__ = [
    "Admin",
    "Broker",
    "BufferFull",
    "Closed",
    "ConnectionFailed",
    "CorruptRecord",
    "EmbeddedBroker",
    "FlumeError",
    "GroupConsumer",
    "GroupNotEmpty",
    "InvalidConfig",
    "InvalidName",
    "InvalidRecord",
    "InvalidRequest",
    "OffsetOutOfRange",
    "PartitionConsumer",
    "Producer",
    "QueueFull",
    "RebalanceInProgress",
    "Record",
    "RecordMetadata",
    "RecordTooLarge",
    "ShuttingDown",
    "StorageError",
    "TopicAlreadyExists",
    "UnknownGroup",
    "UnknownMember",
    "UnknownPartition",
    "UnknownTopic",
    "aio",
]

__version__ = "0.1.0"
