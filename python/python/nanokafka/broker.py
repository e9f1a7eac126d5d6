"""``NanoKafka``: the NanoKafka API over ``flume.EmbeddedBroker``.

How NanoKafka's terms map onto Flume's engine:

- ``create_topic(name, num_partitions, max_size, retention_size, backpressure)``:
  ``max_size`` is the capacity of each partition's write queue (messages
  waiting to be appended): full, ``block`` makes the producer wait and
  ``reject`` raises ``QueueFull``. ``retention_size`` is the number of newest
  messages kept per partition: older ones are no longer handed out and do not
  count as lag (kept in ``<data>/nanokafka.json`` so it survives a restart).
  Creating a topic that exists keeps it as stored (a program that creates its
  topics at start-up runs again after a restart).
- Messages are any JSON-serialisable object, stored as compact UTF-8 JSON and
  decoded on the way out, so they come back as JSON returns them (equal for
  dicts with string keys, lists, strings, numbers, booleans and None; a tuple
  comes back as a list).
- ``key=`` routes by FNV-1a of the key's bytes (a str as UTF-8, bytes as they
  are, anything else as its JSON text) modulo the partition count: stable
  across runs and processes, unlike Python's ``hash``. No key: round robin.
- ``poll`` returns ``(partition, (offset, message))``: the next uncommitted
  message of one of the consumer's partitions (rotating over them), so work
  that is not committed is handed out again. It waits for a message to arrive
  (NanoKafka's consumer loop unpacks the result directly); ``timeout=``
  seconds returns None instead when nothing came.
- ``commit`` takes the offset that was processed; ``lag`` returns
  ``{partition: messages not yet committed}``.
- Several ``NanoKafka()`` objects on one directory in one process share one
  engine (a registry keyed by the directory's real path, holding the engines
  weakly: the last object to go closes it). Another process opening the same
  directory gets an error from the engine's lock.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple, overload

import flume
from flume import QueueFull

__all__ = ["NanoKafka", "QueueFull"]

_META_FILE = "nanokafka.json"


# One encoder and decoder for every message: json.dumps with arguments builds a
# new encoder per call, and json.loads sniffs the encoding of bytes each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()


def _encode(message: Any) -> bytes:
    return _ENCODER.encode(message).encode("utf-8")


def _decode(raw: bytes) -> Any:
    return _DECODER.decode(raw.decode("utf-8"))


def _key_bytes(key: Any) -> Optional[bytes]:
    if key is None:
        return None
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    return json.dumps(key, sort_keys=True, separators=(",", ":")).encode("utf-8")


class _Engine:
    """One engine per directory, shared by every NanoKafka object on it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.broker = flume.EmbeddedBroker(path, auto_create_topics=False)
        self.lock = threading.Lock()
        self.retention: Dict[str, int] = {}
        meta = os.path.join(path, _META_FILE)
        try:
            with open(meta, encoding="utf-8") as f:
                stored = json.load(f)
            self.retention = {str(k): int(v) for k, v in stored.get("retention_size", {}).items()}
        except FileNotFoundError:
            pass
        except (ValueError, AttributeError, TypeError) as e:
            raise flume.StorageError(f"{meta} is not valid: {e}") from e

    def save_meta(self) -> None:
        meta = os.path.join(self.path, _META_FILE)
        tmp = meta + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"retention_size": self.retention}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, meta)


_ENGINES: "weakref.WeakValueDictionary[str, _Engine]" = weakref.WeakValueDictionary()
_ENGINES_LOCK = threading.Lock()


def _engine_for(data_dir: "str | os.PathLike[str]") -> _Engine:
    os.makedirs(data_dir, exist_ok=True)
    key = os.path.realpath(data_dir)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _Engine(key)
            _ENGINES[key] = engine
        return engine


class NanoKafka:
    """An embedded log-based broker on ``data_dir`` (default ``./data``)."""

    def __init__(self, data_dir: "str | os.PathLike[str]" = "data") -> None:
        self._engine: Optional[_Engine] = _engine_for(data_dir)

    @property
    def _e(self) -> _Engine:
        if self._engine is None:
            raise flume.Closed("NanoKafka is closed")
        return self._engine

    @property
    def data_dir(self) -> str:
        """The directory's real path."""
        return self._e.path

    def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        max_size: int = 1000,
        retention_size: Optional[int] = None,
        backpressure: str = "block",
    ) -> None:
        """Creates a topic; one that exists is kept as it is stored."""
        if backpressure not in ("block", "reject"):
            raise ValueError(f"backpressure must be 'block' or 'reject', not {backpressure!r}")
        if retention_size is not None and retention_size < 1:
            raise ValueError(f"retention_size must be at least 1, not {retention_size}")
        e = self._e
        created = e.broker.create_topic(
            name,
            num_partitions,
            max_pending=max_size,
            backpressure=backpressure,
            exist_ok=True,
        )
        if created:
            with e.lock:
                if retention_size is None:
                    e.retention.pop(name, None)
                else:
                    e.retention[name] = retention_size
                e.save_meta()

    def produce(self, topic: str, message: Any, key: Any = None) -> Tuple[int, int]:
        """Appends ``message`` (JSON-serialisable); returns (partition, offset).

        Raises QueueFull when the partition's queue is full in reject mode.
        """
        m = self._e.broker.produce(topic, _encode(message), _key_bytes(key))
        return m.partition, m.offset

    def produce_many(self, topic: str, messages: List[Any], key: Any = None) -> List[Tuple[int, int]]:
        """Appends many messages in few batches; returns their (partition, offset)."""
        encoded = [_encode(m) for m in messages]
        k = _key_bytes(key)
        keys = None if k is None else [k] * len(encoded)
        return [(m.partition, m.offset) for m in self._e.broker.produce_many(topic, encoded, keys=keys)]

    def join_group(self, topic: str, group: str, consumer: str) -> None:
        """Adds ``consumer`` to ``group`` on ``topic``; partitions are split among its consumers."""
        self._e.broker.join_group(topic, group, consumer)

    def leave_group(self, topic: str, group: str, consumer: str) -> None:
        self._e.broker.leave_group(topic, group, consumer)

    def _trim(self, topic: str, group: str) -> None:
        """Moves the group past messages that retention no longer keeps."""
        e = self._e
        keep = e.retention.get(topic)
        if keep is None:
            return
        offsets = e.broker.offsets(topic)
        for p, (start, end) in offsets.items():
            first_kept = max(start, end - keep)
            done = e.broker.committed(group, topic, p) or 0
            if done < first_kept:
                e.broker.commit(topic, group, p, first_kept - 1)

    @overload
    def poll(self, topic: str, group: str, consumer: str) -> Tuple[int, Tuple[int, Any]]: ...

    @overload
    def poll(self, topic: str, group: str, consumer: str, timeout: None) -> Tuple[int, Tuple[int, Any]]: ...

    @overload
    def poll(
        self, topic: str, group: str, consumer: str, timeout: float
    ) -> Optional[Tuple[int, Tuple[int, Any]]]: ...

    def poll(
        self, topic: str, group: str, consumer: str, timeout: Optional[float] = None
    ) -> Optional[Tuple[int, Tuple[int, Any]]]:
        """``(partition, (offset, message))``: the next uncommitted message.

        Waits until one arrives, or ``timeout`` seconds (then returns None).
        """
        e = self._e
        self._trim(topic, group)
        r = e.broker.poll(topic, group, consumer, timeout=timeout)
        if r is None:
            return None
        return r.partition, (r.offset, _decode(r.value))

    def poll_many(
        self,
        topic: str,
        group: str,
        consumer: str,
        max_messages: int = 500,
        timeout: Optional[float] = 0.0,
    ) -> List[Tuple[int, Tuple[int, Any]]]:
        """Up to ``max_messages`` uncommitted messages; commit the last offset per partition."""
        e = self._e
        self._trim(topic, group)
        records = e.broker.poll_many(topic, group, consumer, max_messages, timeout=timeout)
        decode = _DECODER.decode
        return [(r.partition, (r.offset, decode(r.value.decode("utf-8")))) for r in records]

    def commit(self, topic: str, group: str, partition: int, offset: int) -> None:
        """Marks the message at ``offset`` of ``partition`` as processed."""
        self._e.broker.commit(topic, group, partition, offset)

    def share_poll(
        self, topic: str, group: str, consumer: str, timeout: Optional[float] = None
    ) -> Optional[Tuple[int, Tuple[int, Any]]]:
        """Queues: ``(partition, (offset, message))`` acquired for ``consumer`` of share group ``group``.

        Any number of consumers of the group share the topic's partitions; each message is
        handed to one of them at a time, until it is ``ack``-ed, ``release``-d (delivered
        again) or ``reject``-ed, or its lock runs out (then it is delivered again). Waits
        until one is available, or ``timeout`` seconds (then returns None).
        """
        got = self._e.broker.share_poll(topic, group, consumer, 1, timeout=timeout)
        if not got:
            return None
        r, _count = got[0]
        return r.partition, (r.offset, _decode(r.value))

    def ack(self, topic: str, group: str, consumer: str, partition: int, offset: int) -> None:
        """Accepts a message from ``share_poll``: done, never delivered again."""
        self._e.broker.ack(topic, group, consumer, partition, offset)

    def release(self, topic: str, group: str, consumer: str, partition: int, offset: int) -> None:
        """Gives a message from ``share_poll`` back: delivered again (to any consumer)."""
        self._e.broker.release(topic, group, consumer, partition, offset)

    def reject(self, topic: str, group: str, consumer: str, partition: int, offset: int) -> None:
        """Rejects a message from ``share_poll``: never delivered again."""
        self._e.broker.reject(topic, group, consumer, partition, offset)

    def lag(self, topic: str, group: str) -> Dict[int, int]:
        """``{partition: messages not yet committed by group}``."""
        e = self._e
        lag = e.broker.lag(topic, group)
        keep = e.retention.get(topic)
        if keep is not None:
            lag = {p: min(n, keep) for p, n in lag.items()}
        return lag

    def topics(self) -> List[str]:
        return self._e.broker.topics()

    def close(self) -> None:
        """Lets go of the engine; the last NanoKafka object on a directory closes it."""
        self._engine = None

    def __enter__(self) -> "NanoKafka":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NanoKafka({self._engine.path if self._engine else 'closed'!r})"
