"""The network SDK for asyncio.

The Rust futures run on Flume's runtime threads; each call returns an awaitable
that completes on the event loop's thread (``loop.call_soon_threadsafe``).
Cancelling an await cancels the Rust future (a cancelled poll loses nothing: the
records it was fetching are fetched again)::

    import flume.aio

    async def main(address):
        async with await flume.aio.Producer.connect(address) as p:
            meta = await p.send("orders", b"hello", key=b"user-1")
        async with await flume.aio.GroupConsumer.connect(address, "billing", "orders") as c:
            async for record in c:
                handle(record)
                await c.commit(record)
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _flume
from ._flume import Closed, Record, RecordMetadata

__all__ = ["Admin", "GroupConsumer", "PartitionConsumer", "Producer"]

Bytes = Union[bytes, bytearray, str]

_Self = TypeVar("_Self")


class _Closing:
    """``close()`` and ``async with``, over the wrapped object's ``close_async``."""

    _inner: Any

    async def close(self) -> None:
        await self._inner.close_async()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class _Consumer(_Closing):
    """``async for record in consumer``, until the consumer is closed."""

    def __aiter__(self: _Self) -> _Self:
        return self

    async def __anext__(self) -> Record:
        try:
            return await self._inner.poll_async()
        except Closed:
            raise StopAsyncIteration from None


class Producer(_Closing):
    """A batching producer; ``await Producer.connect(address)``."""

    def __init__(self, inner: _flume.Producer) -> None:
        self._inner = inner

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        linger_ms: int = 0,
        acks: Union[int, str, None] = None,
        idempotence: Optional[bool] = None,
        compression: str = "none",
        partitioner: str = "fnv1a",
    ) -> "Producer":
        """Connects to the broker at ``address``: "host:port" (Flume) or
        "kafka://host:port[,host:port...]" (a Kafka cluster; ``acks``,
        ``idempotence``, ``compression`` and ``partitioner`` apply there only)."""
        return cls(
            await _flume.Producer.connect_async(
                address,
                linger_ms=linger_ms,
                acks=acks,
                idempotence=idempotence,
                compression=compression,
                partitioner=partitioner,
            )
        )

    async def send(
        self,
        topic: str,
        value: Bytes,
        key: Optional[Bytes] = None,
        *,
        headers: Any = None,
        partition: Optional[int] = None,
        timestamp: Optional[int] = None,
    ) -> RecordMetadata:
        """Sends one record; resolves once the broker acknowledged it."""
        return await self._inner.send_async(
            topic, value, key, headers=headers, partition=partition, timestamp=timestamp
        )

    async def send_many(
        self,
        topic: str,
        values: Iterable[Bytes],
        *,
        keys: Optional[Iterable[Optional[Bytes]]] = None,
        partition: Optional[int] = None,
    ) -> List[RecordMetadata]:
        """Sends many records with many in flight; metadata in order."""
        return await self._inner.send_many_async(topic, values, keys=keys, partition=partition)

    async def flush(self) -> None:
        """Waits until everything sent before is acknowledged."""
        await self._inner.flush_async()

    async def close(self) -> None:
        """Flushes and closes."""
        await super().close()


class GroupConsumer(_Consumer):
    """A consumer-group member; ``async for record in consumer``."""

    def __init__(self, inner: _flume.GroupConsumer) -> None:
        self._inner = inner

    @classmethod
    async def connect(
        cls,
        address: str,
        group: str,
        topics: Union[str, Sequence[str]],
        *,
        auto_commit: bool = True,
        start: Union[str, int, None] = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: Optional[int] = None,
        max_wait_ms: int = 500,
        assignor: str = "range",
    ) -> "GroupConsumer":
        """Connects, joins ``group`` and waits for the first assignment."""
        inner = await _flume.GroupConsumer.connect_async(
            address,
            group,
            topics,
            auto_commit=auto_commit,
            start=start,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_wait_ms=max_wait_ms,
            assignor=assignor,
        )
        return cls(inner)

    async def poll(self) -> Record:
        """The next record (waits until one arrives; wrap in asyncio.wait_for for a timeout)."""
        return await self._inner.poll_async()

    async def commit(self, record: Record) -> None:
        """Commits ``record.offset + 1`` for its partition."""
        await self._inner.commit_async(record)

    async def close(self) -> None:
        """Commits (auto-commit mode) and leaves the group."""
        await super().close()


class PartitionConsumer(_Consumer):
    """Reads one partition; ``async for record in consumer``."""

    def __init__(self, inner: _flume.PartitionConsumer) -> None:
        self._inner = inner

    @classmethod
    async def connect(
        cls, address: str, topic: str, partition: int, *, start: Union[str, int, None] = None
    ) -> "PartitionConsumer":
        """Connects to read ``topic``/``partition`` from ``start`` ("earliest", "latest" or an offset)."""
        return cls(await _flume.PartitionConsumer.connect_async(address, topic, partition, start=start))

    async def poll(self) -> Record:
        """The next record (waits until one arrives)."""
        return await self._inner.poll_async()


class Admin:
    """Topics, configs, offsets, lag and groups' offsets; ``await Admin.connect(address)``."""

    def __init__(self, inner: _flume.Admin) -> None:
        self._inner = inner

    @classmethod
    async def connect(cls, address: str) -> "Admin":
        return cls(await _flume.Admin.connect_async(address))

    async def create_topic(
        self,
        name: str,
        partitions: Optional[int] = None,
        *,
        configs: Optional[Dict[str, Union[str, int, float, bool]]] = None,
        retention_bytes: Optional[int] = None,
        retention_ms: Optional[int] = None,
        segment_bytes: Optional[int] = None,
        max_pending: Optional[int] = None,
        backpressure: Optional[str] = None,
    ) -> None:
        await self._inner.create_topic_async(
            name,
            partitions,
            configs=configs,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            segment_bytes=segment_bytes,
            max_pending=max_pending,
            backpressure=backpressure,
        )

    async def describe(
        self, topics: Optional[List[str]] = None
    ) -> Dict[str, Dict[int, Tuple[int, int]]]:
        return await self._inner.describe_async(topics)

    async def lag(self, group: str, topic: str) -> Dict[int, int]:
        return await self._inner.lag_async(group, topic)

    async def describe_configs(self, topic: str) -> Dict[str, Tuple[str, str]]:
        return await self._inner.describe_configs_async(topic)

    async def alter_configs(
        self,
        topic: str,
        configs: Optional[Dict[str, Union[str, int, float, bool]]] = None,
        *,
        delete: Optional[List[str]] = None,
    ) -> Dict[str, Tuple[str, str]]:
        return await self._inner.alter_configs_async(topic, configs, delete=delete)

    async def delete_records(self, topic: str, partition: int, before: Optional[int] = None) -> int:
        return await self._inner.delete_records_async(topic, partition, before)

    async def create_partitions(self, topic: str, partitions: int, *, validate_only: bool = False) -> int:
        return await self._inner.create_partitions_async(topic, partitions, validate_only=validate_only)

    async def delete_group_offsets(
        self, group: str, topic: str, partitions: Optional[List[int]] = None
    ) -> List[int]:
        return await self._inner.delete_group_offsets_async(group, topic, partitions)

    async def delete_group(self, group: str) -> int:
        return await self._inner.delete_group_async(group)
