"""Broker CPU per Fetch for a consumer of many partitions, with and without a fetch session.

    python benchmarks/bench_fetch_sessions.py [--partitions 1000] [--fetches 300] [--rounds 3]

A real broker process; one topic of N partitions with one record each. A raw client (kafka-python's
protocol classes over a socket, so the client's own costs stay out of the broker's figures) first
reads every partition to its end, then sends caught-up fetches (max_wait 0) in a loop:

- full: sessionless v12 fetches naming all N partitions (what a client without KIP-227 sends);
- incremental: one full fetch opening a session, then v12 fetches of that session naming nothing
  (the broker still checks every partition; the answer carries none).

It prints the broker's CPU time per fetch (psutil, user + system) and the request and response
sizes. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.consumer import FetchRequest, FetchResponse  # noqa: E402

from kafkacompat.testing.process import BrokerProcess  # noqa: E402

VERSION = 12


class Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.correlation = 0

    def call(self, request) -> tuple[object, int, int]:
        self.correlation += 1
        client = b"bench"
        header = struct.pack(">hhih", 1, VERSION, self.correlation, len(client)) + client + b"\x00"
        body = header + bytes(request.encode(version=VERSION))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", self._exact(4))
        payload = self._exact(size)
        return FetchResponse.decode(payload[5:], version=VERSION), len(body), size

    def _exact(self, size: int) -> bytes:
        parts = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("closed")
            parts.append(chunk)
            size -= len(chunk)
        return b"".join(parts)


def fetch(topic: str, offsets: dict[int, int] | None, session_id: int, epoch: int) -> FetchRequest:
    parts = [FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20,
                                                   current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
             for p, o in (offsets or {}).items()]
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                        session_id=session_id, session_epoch=epoch,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts)] if parts else [],
                        forgotten_topics_data=[], rack_id="")


def setup(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        producer.produce(topic, b"x" * 100, partition=p)
    assert producer.flush(60) == 0


def measure(proc: psutil.Process, raw: Raw, topic: str, partitions: int, fetches: int, incremental: bool) -> str:
    caught_up = {p: 1 for p in range(partitions)}
    session_id, epoch = 0, -1
    if incremental:
        answer, _, _ = raw.call(fetch(topic, caught_up, 0, 0))
        session_id, epoch = answer.session_id, 1
        assert session_id != 0, "the broker opened no session"
    before = proc.cpu_times()
    sizes = (0, 0)
    for _ in range(fetches):
        request = fetch(topic, None if incremental else caught_up, session_id, epoch)
        answer, sent, received = raw.call(request)
        assert answer.error_code == 0
        sizes = (sent, received)
        if incremental:
            epoch += 1
    after = proc.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    kind = "incremental" if incremental else "full"
    return (f"{kind:11s}: broker CPU {cpu / fetches * 1e6:8.0f} us per fetch; "
            f"request {sizes[0]:6d} B, response {sizes[1]:6d} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--fetches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            topic = f"sessions-{uuid.uuid4().hex[:6]}"
            started = time.monotonic()
            setup(broker.bootstrap, topic, args.partitions)
            print(f"setup: {args.partitions} partitions, one record each, in {time.monotonic() - started:.1f} s",
                  flush=True)
            proc = psutil.Process(broker.pid())
            raw = Raw(broker.port)
            for round_ in range(1, args.rounds + 1):
                for incremental in (False, True):
                    print(f"round {round_} {measure(proc, raw, topic, args.partitions, args.fetches, incremental)}",
                          flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
