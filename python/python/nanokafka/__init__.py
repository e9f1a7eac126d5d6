"""NanoKafka on Flume's engine: ``from nanokafka import NanoKafka``.

A NanoKafka program runs unchanged: topics with partitions, JSON messages,
consumer groups with manual commits, lag, retention, block/reject
backpressure, and state that survives a restart, stored by Flume's engine
(CRC-checked segments, crash recovery) in ``./data`` by default.
"""

from __future__ import annotations

from .broker import NanoKafka, QueueFull

__all__ = ["NanoKafka", "QueueFull"]
