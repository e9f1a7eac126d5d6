"""Records/s of produce and poll: Flume's engine from Python vs a pure-Python log.

The baseline is the original NanoKafka design's approach, written here: one
partition kept as a Python list, a lock around every operation, one JSON line
per message appended (and flushed to the OS) to ``<topic>_<partition>.log``,
and one JSON line per commit to ``.offsets``. Flume runs the same loops through
``nanokafka.NanoKafka`` (JSON values, as NanoKafka programs use it), through
``flume.EmbeddedBroker`` with bytes, and with the batch calls.

    python python/bench/bench.py [--records 100000]

Both sides acknowledge a message once it is written to the OS (no fsync).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import flume
from nanokafka import NanoKafka


class PyLog:
    """The pure-Python NanoKafka-style log: a lock and a JSON line per message."""

    def __init__(self, data_dir: str, topic: str) -> None:
        os.makedirs(data_dir, exist_ok=True)
        self.lock = threading.Lock()
        self.messages: List[Any] = []
        self.log = open(os.path.join(data_dir, f"{topic}_0.log"), "a", encoding="utf-8")
        self.offsets = open(os.path.join(data_dir, f"{topic}_0.offsets"), "a", encoding="utf-8")
        self.committed: dict = {}

    def produce(self, message: Any) -> Tuple[int, int]:
        with self.lock:
            offset = len(self.messages)
            self.log.write(json.dumps({"offset": offset, "message": message}) + "\n")
            self.log.flush()
            self.messages.append(message)
            return 0, offset

    def poll(self, group: str) -> Optional[Tuple[int, Tuple[int, Any]]]:
        with self.lock:
            offset = self.committed.get(group, 0)
            if offset >= len(self.messages):
                return None
            return 0, (offset, self.messages[offset])

    def commit(self, group: str, offset: int) -> None:
        with self.lock:
            self.committed[group] = offset + 1
            self.offsets.write(json.dumps({"group": group, "offset": offset + 1}) + "\n")
            self.offsets.flush()


def rate(n: int, f: Callable[[], object]) -> float:
    start = time.perf_counter()
    f()
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    n, batch = args.records, args.batch
    msg = {"id": 12345, "user": "user-1", "item": "widget", "qty": 3}
    raw = json.dumps(msg).encode()
    rows = []

    with tempfile.TemporaryDirectory() as d:
        # Pure Python.
        log = PyLog(os.path.join(d, "py"), "bench")
        p_prod = rate(n, lambda: [log.produce(msg) for _ in range(n)])

        def py_poll() -> None:
            for _ in range(n):
                _, (offset, _m) = log.poll("g")  # type: ignore[misc]
                log.commit("g", offset)

        p_poll = rate(n, py_poll)
        rows.append(("pure-Python log (lock + JSON line)", p_prod, p_poll))

        # nanokafka on Flume.
        nk = NanoKafka(os.path.join(d, "nk"))
        nk.create_topic("bench", num_partitions=1)
        k_prod = rate(n, lambda: [nk.produce("bench", msg) for _ in range(n)])
        nk.join_group("bench", "g", "c")

        def nk_poll() -> None:
            for _ in range(n):
                p, (offset, _m) = nk.poll("bench", "g", "c")  # type: ignore[misc]
                nk.commit("bench", "g", p, offset)

        k_poll = rate(n, nk_poll)
        rows.append(("nanokafka.NanoKafka produce / poll+commit", k_prod, k_poll))

        nk.create_topic("batch", num_partitions=1)
        k_prod_b = rate(n, lambda: [nk.produce_many("batch", [msg] * batch) for _ in range(n // batch)])
        nk.join_group("batch", "g", "c")

        def nk_poll_many() -> None:
            left = n
            while left > 0:
                got = nk.poll_many("batch", "g", "c", max_messages=batch)
                left -= len(got)
                p, (offset, _m) = got[-1]
                nk.commit("batch", "g", p, offset)

        k_poll_b = rate(n, nk_poll_many)
        rows.append((f"nanokafka produce_many / poll_many+commit ({batch})", k_prod_b, k_poll_b))

        # flume.EmbeddedBroker with bytes (no JSON).
        with flume.EmbeddedBroker(os.path.join(d, "fl")) as b:
            b.create_topic("bench", 1)
            f_prod = rate(n, lambda: [b.produce("bench", raw) for _ in range(n)])
            b.join_group("bench", "g", "c")

            def fl_poll() -> None:
                for _ in range(n):
                    r = b.poll("bench", "g", "c")
                    b.commit("bench", "g", r.partition, r.offset)  # type: ignore[union-attr]

            f_poll = rate(n, fl_poll)
            rows.append(("flume.EmbeddedBroker produce / poll+commit (bytes)", f_prod, f_poll))
            b.create_topic("batch", 1)
            f_prod_b = rate(n, lambda: [b.produce_many("batch", [raw] * batch) for _ in range(n // batch)])
            b.join_group("batch", "g", "c")

            def fl_poll_many() -> None:
                left = n
                while left > 0:
                    got = b.poll_many("batch", "g", "c", max_records=batch)
                    left -= len(got)
                    b.commit("batch", "g", got[-1].partition, got[-1].offset)

            f_poll_b = rate(n, fl_poll_many)
            rows.append((f"flume.EmbeddedBroker produce_many / poll_many ({batch})", f_prod_b, f_poll_b))

    print(f"{n} records of {len(raw)} B JSON, one partition\n")
    print(f"| {'what':<58} | {'produce rec/s':>14} | {'poll rec/s':>12} |")
    print(f"|{'-' * 60}|{'-' * 16}:|{'-' * 14}:|")
    for name, a, b_ in rows:
        print(f"| {name:<58} | {a:>14,.0f} | {b_:>12,.0f} |")


if __name__ == "__main__":
    main()
