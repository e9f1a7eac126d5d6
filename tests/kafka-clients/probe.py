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


CLIENT_ID = b"flume-kafka-clients-probe"


def request(addr, payload, timeout):
    host, port = addr.rsplit(":", 1)
    end = time.monotonic() + timeout
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", read_exact(s, 4, end))
        if not 6 <= size <= 1 << 20:
            raise ValueError(f"response size {size}")
        return read_exact(s, size, end)


def probe_flexible(addr, version, timeout):
    """ApiVersions v3/v4 as librdkafka (v3) and kafka-python 3.x (v4) send first. Kafka
    answers either in that version (error 0, flexible body) or, if it does not serve it,
    with error 35 UNSUPPORTED_VERSION in the v0 body (KIP-511) so the client can retry
    lower. Returns a sentence saying which, or raises on an answer a client cannot use."""
    name, ver = b"probe", b"1.0"
    header = struct.pack(">hhih", 18, version, 9, len(CLIENT_ID)) + CLIENT_ID + b"\x00"  # header v2: tagged fields
    body = bytes([len(name) + 1]) + name + bytes([len(ver) + 1]) + ver + b"\x00"  # compact strings, tagged fields
    resp = request(addr, header + body, timeout)
    corr, err = struct.unpack(">ih", resp[:6])
    if corr != 9:
        raise ValueError(f"correlation id {corr}, sent 9")
    if err == 35:
        (n,) = struct.unpack(">i", resp[6:10])  # v0 body: int32 array length
        if not 0 <= n <= 1000 or len(resp) != 10 + 6 * n:
            raise ValueError("UNSUPPORTED_VERSION answer is not in the v0 body format (KIP-511)")
        return f"ApiVersions v{version}: UNSUPPORTED_VERSION in the v0 format (clients retry lower)"
    if err != 0:
        raise ValueError(f"error code {err}")
    n = resp[6] - 1  # compact array length + 1 (fewer than 127 APIs)
    if not 0 <= n <= 126:
        raise ValueError(f"ApiVersions v{version} answer: compact array length byte {resp[6]}")
    return f"ApiVersions v{version}: answered ({n} APIs)"


def probe(addr, timeout):
    body = struct.pack(">hhih", 18, 0, 7, len(CLIENT_ID)) + CLIENT_ID
    resp = request(addr, body, timeout)
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
    # Diagnostics only (the clients' own scenarios fail if this goes wrong).
    for v in (3, 4):
        try:
            print(f"{addr}: {probe_flexible(addr, v, timeout)}", file=sys.stderr)
        except (OSError, ValueError, struct.error, IndexError) as e:
            print(f"{addr}: ApiVersions v{v} (sent first by {'librdkafka' if v == 3 else 'kafka-python 3.x'}): "
                  f"answer not in the form Kafka gives (kafka-python cannot read it): {type(e).__name__}: {e}", file=sys.stderr)
