#!/usr/bin/env python3
"""Starts librdkafka's built-in mock cluster (one broker) and prints its HOST:PORT,
then serves until SIGTERM/SIGINT. For checking this harness itself, not Flume:

    "$FLUME_CACHE/kafka-clients-venv/bin/python" tests/kafka-clients/mock_broker.py > addr &
    FLUME_KAFKA_BOOTSTRAP=$(cat addr) KAFKA_CLIENTS_AUTO_CREATE=1 tests/kafka-clients/run.sh

The mock has no CreateTopics (hence KAFKA_CLIENTS_AUTO_CREATE=1: it creates topics with
4 partitions on first use) and answers ApiVersions v3+ in a form kafka-python cannot
read; see README.md for what passes against it.
"""

import signal

from confluent_kafka import Producer

p = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "", "log_level": 3})
md = p.list_topics(timeout=10)
b = next(iter(md.brokers.values()))
print(f"{b.host}:{b.port}", flush=True)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
signal.sigwait({signal.SIGTERM, signal.SIGINT})
