"""Shared fixtures.

The three NanoKafka sample tests (test_basic.py, test_commit_behavior.py,
test_retention.py) are copied verbatim from the NanoKafka design. Two of them
use ``NanoKafka`` without importing it (in the design they sit under a module
that does), so this file makes the name available to them as a builtin, and
every test runs in its own temporary working directory, because
``NanoKafka()`` stores its state in ``./data``.
"""

from __future__ import annotations

import builtins
import time
from typing import Callable, Iterator

import pytest

from nanokafka import NanoKafka

builtins.NanoKafka = NanoKafka  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _own_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Waits for ``cond`` with a deadline (no fixed sleeps as synchronisation)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture
def tcp_broker(tmp_path) -> Iterator["object"]:
    """A Flume TCP broker in this process on a free port."""
    import flume

    b = flume.Broker.start(tmp_path / "broker-data", port=0, default_partitions=2)
    try:
        yield b
    finally:
        b.shutdown()
