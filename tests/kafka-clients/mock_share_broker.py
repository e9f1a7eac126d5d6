#!/usr/bin/env python3
"""A stand-in for `flume-cli broker` built on librdkafka's mock cluster, which serves share
groups (KIP-932): for checking share_test.py itself, not Flume.

    mock_share_broker.py broker --host H --port P --kafka-port K --data DIR \\
        [--share-record-lock-duration-ms MS] [--share-delivery-count-limit N] \\
        [--share-auto-offset-reset latest|earliest]
    mock_share_broker.py broker --help

The mock cluster (one broker, from the librdkafka bundled with confluent-kafka, loaded with
ctypes to set its share-group settings) listens on a port of its own and advertises it in
Metadata; K is a TCP proxy to it for the bootstrap. It has no CreateTopics: topics are made
on first use (KAFKA_CLIENTS_AUTO_CREATE=1) with 4 partitions, split between the members of a
share group, except those named in MOCK_SHARE_TOPICS (comma-separated), made at start with one
partition; and no group configs, so share_test.py takes the broker-flag path. Serves until
SIGTERM/SIGINT.

    P=mock1; export KAFKA_CLIENTS_AUTO_CREATE=1
    export MOCK_SHARE_TOPICS=$(printf "$P-sh-%s," three rel lock close rej reset)
    "$PY" tests/kafka-clients/share_test.py --flume tests/kafka-clients/mock_share_broker.py --prefix $P
"""

import argparse
import ctypes
import glob
import os
import signal
import socket
import sys
import threading


def librdkafka():
    import confluent_kafka  # noqa: F401  (only to find the bundled library)

    here = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    libs = glob.glob(os.path.join(here, "confluent_kafka.libs", "librdkafka*.so*"))
    if not libs:
        sys.exit("no librdkafka bundled with confluent-kafka")
    lib = ctypes.CDLL(libs[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    for f in ("record_lock_duration", "max_delivery_attempts", "auto_offset_reset"):
        fn = getattr(lib, f"rd_kafka_mock_sharegroup_set_{f}")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
        fn.restype = None
    return lib


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(listen, target):
    while True:
        c, _ = listen.accept()
        try:
            u = socket.create_connection(target)
        except OSError:
            c.close()
            continue
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()


def main():
    ap = argparse.ArgumentParser(prog="mock_share_broker.py broker")
    ap.add_argument("cmd", choices=["broker"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kafka-port", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--share-record-lock-duration-ms", type=int)
    ap.add_argument("--share-delivery-count-limit", type=int)
    ap.add_argument("--share-auto-offset-reset", choices=["latest", "earliest"])
    a = ap.parse_args()
    lib = librdkafka()
    errstr = ctypes.create_string_buffer(512)
    rk = lib.rd_kafka_new(1, lib.rd_kafka_conf_new(), errstr, 512)  # RD_KAFKA_CONSUMER: no producer threads needed
    if not rk:
        sys.exit(f"rd_kafka_new: {errstr.value.decode()}")
    mc = lib.rd_kafka_mock_cluster_new(rk, 1)
    if a.share_record_lock_duration_ms is not None:
        lib.rd_kafka_mock_sharegroup_set_record_lock_duration(mc, a.share_record_lock_duration_ms)
    if a.share_delivery_count_limit is not None:
        lib.rd_kafka_mock_sharegroup_set_max_delivery_attempts(mc, a.share_delivery_count_limit)
    if a.share_auto_offset_reset == "earliest":
        lib.rd_kafka_mock_sharegroup_set_auto_offset_reset(mc, 1)
    # The mock makes topics on first use with 4 partitions and its share assignor splits
    # partitions between members; share_test.py's scenarios want one partition read by all.
    for t in filter(None, os.environ.get("MOCK_SHARE_TOPICS", "").split(",")):
        lib.rd_kafka_mock_topic_create(mc, t.encode(), 1, 1)
    host, port = lib.rd_kafka_mock_cluster_bootstraps(mc).decode().split(",")[0].rsplit(":", 1)
    print(f"mock cluster at {host}:{port}, proxied from {a.host}:{a.kafka_port}", flush=True)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.host, a.kafka_port))
    ls.listen(64)
    threading.Thread(target=proxy, args=(ls, (host, int(port))), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
