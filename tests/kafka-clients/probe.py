#!/usr/bin/env python3
"""Does HOST:PORT answer a Kafka ApiVersions v0 request? (standard library only)

    probe.py HOST:PORT [TIMEOUT_S]

Run by run.sh before any client, so a broker that does not speak the protocol at all
fails in seconds with one line, instead of every client scenario timing out. On
success prints the advertised API version ranges to stderr (useful when a client
picks a version the broker does not serve) and exits 0; otherwise prints why and exits 1.
"""

import socket
import struct
import sys
import time

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    22: "InitProducerId", 32: "DescribeConfigs", 36: "SaslAuthenticate", 17: "SaslHandshake",
}


def read_exact(sock, n, end):
    buf = b""
    while len(buf) < n:
        sock.settimeout(max(0.01, end - time.monotonic()))
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def probe(addr, timeout):
    host, port = addr.rsplit(":", 1)
    end = time.monotonic() + timeout
    client_id = b"flume-kafka-clients-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", read_exact(s, 4, end))
        if not 6 <= size <= 1 << 20:
            raise ValueError(f"response size {size}")
        resp = read_exact(s, size, end)
    corr, err, n = struct.unpack(">ihi", resp[:10])
    if corr != 7:
        raise ValueError(f"correlation id {corr}, sent 7")
    if err != 0:
        raise ValueError(f"error code {err}")
    apis = [struct.unpack(">hhh", resp[10 + 6 * i : 16 + 6 * i]) for i in range(n)]
    return apis


if __name__ == "__main__":
    addr = sys.argv[1]
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    try:
        apis = probe(addr, timeout)
    except (OSError, ValueError, struct.error) as e:
        print(f"{addr} does not answer a Kafka ApiVersions v0 request within {timeout:.0f}s: {type(e).__name__}: {e}")
        sys.exit(1)
    text = ", ".join(f"{API_NAMES.get(k, k)} v{lo}-{hi}" for k, lo, hi in sorted(apis))
    print(f"{addr} advertises: {text}", file=sys.stderr)
