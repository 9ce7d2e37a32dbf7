"""The connection loop in-process: an internal error in one request closes only that
connection, with a log line, and the broker keeps serving others; a client that does not read its
socket stops being read from and holds at most one piece of a streamed response, within the
listener's bound, while other clients are served."""

from __future__ import annotations

import fcntl
import logging
import socket
import struct
import termios

import trio
import trio.testing

from kafkacompat.broker import Broker
from kafkacompat.config import BrokerConfig
from kafkacompat.handlers import REGISTRY
from kafkacompat.server import Connection, UnsentBytes

METADATA, API_VERSIONS = 3, 18


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(payload)) + payload


async def read_response(sock) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


def test_internal_error_closes_only_that_connection(tmp_path, monkeypatch, caplog):
    async def failing_handler(request, ctx):
        raise RuntimeError("synthetic failure")

    original = REGISTRY[METADATA]
    monkeypatch.setitem(REGISTRY, METADATA, type(original)(
        original.api_key, original.min_version, original.max_version, failing_handler, original.decode,
        original.encode,
    ))
    broker = Broker(BrokerConfig.load(data_dir=tmp_path))
    broker.open()

    async def main():
        async with trio.open_nursery() as nursery:
            bad_server, bad_client = trio.socket.socketpair()
            good_server, good_client = trio.socket.socketpair()
            nursery.start_soon(Connection(broker, bad_server).serve)
            nursery.start_soon(Connection(broker, good_server).serve)
            await bad_client.send(request(METADATA, 1, 7, struct.pack(">i", -1)))
            assert await read_response(bad_client) == b"", "the failing request's connection is closed"
            await good_client.send(request(API_VERSIONS, 0, 8))
            response = await read_response(good_client)
            assert struct.unpack(">ih", response[4:10]) == (8, 0)
            good_client.close()

    with caplog.at_level(logging.ERROR, logger="kafkacompat.server"):
        trio.run(main)
    broker.close()
    assert any("internal error" in r.getMessage() and r.exc_info for r in caplog.records)


# ---- clients that do not read their sockets ------------------------------------------------------

MIB = 1024 * 1024
PRODUCE, FETCH = 0, 1
VALUE = bytes(range(256)) * 4  # 1 KiB
RECORDS_PER_BATCH = 250
BATCHES = 100  # 25 MB stored in 250 KiB batches
# A piece of converted records: about 64 KiB of messages (one more crosses it).
PIECE_BOUND = 64 * 1024 + 2 * len(VALUE)


def framed_request(request, version: int, correlation_id: int) -> bytes:
    """A kafka-python request, framed with header v1 (no client id)."""
    body = bytes(request.encode(version=version))
    header = struct.pack(">hhih", request.API_KEY, version, correlation_id, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def stored_batch(base_offset: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(RECORDS_PER_BATCH):
        builder.append(i, timestamp=1_600_000_000_000 + base_offset + i, key=b"%d" % (base_offset + i), value=VALUE,
                       headers=[])
    return bytes(builder.build())


def produce_request(topic: str, records: bytes, correlation_id: int) -> bytes:
    from kafka.protocol.producer import ProduceRequest

    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])])
    return framed_request(request, 3, correlation_id)


def fetch_v2_request(topic: str, max_bytes: int, correlation_id: int) -> bytes:
    from kafka.protocol.consumer import FetchRequest

    topic_cls = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, topics=[
        topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(partition=0, fetch_offset=0,
                                                                    partition_max_bytes=max_bytes)])])
    return framed_request(request, 2, correlation_id)


async def recv_exact(sock, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await sock.recv(min(size - len(data), 1 << 20))
        assert chunk, "the broker closed the connection"
        data += chunk
    return bytes(data)


async def recv_frame(sock) -> bytes:
    (size,) = struct.unpack(">i", await recv_exact(sock, 4))
    return await recv_exact(sock, size)


async def tcp_connection(broker: Broker, nursery, unsent: UnsentBytes, *, receive_buffer: int | None = None):
    """A loopback TCP connection served by a Connection: (client socket, that Connection)."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    if receive_buffer:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    connection = Connection(broker, server, unsent)
    nursery.start_soon(connection.serve)
    return client, connection


def unread_bytes(sock) -> int:
    """Bytes in the socket's receive queue that its owner has not read."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


async def fill_topic(broker: Broker, nursery, unsent: UnsentBytes, topic: str) -> trio.socket.SocketType:
    broker.create_topic(topic, 1, 1, {})
    producer, _ = await tcp_connection(broker, nursery, unsent)
    for n in range(BATCHES):
        await producer.send(produce_request(topic, stored_batch(n * RECORDS_PER_BATCH), n))
        assert produced_offset(await recv_frame(producer)) == n * RECORDS_PER_BATCH
    return producer


def produced_offset(response: bytes) -> int:
    from kafka.protocol.producer import ProduceResponse

    (partition,) = ProduceResponse.decode(response[4:], version=3).responses[0].partition_responses
    assert partition.error_code == 0
    return partition.base_offset


def check_converted(response: bytes, first_offset: int) -> int:
    """The Fetch v2 response holds magic 1 messages from ``first_offset`` on, in order, with the
    stored values (kafka-python reads them); returns how many."""
    from kafka.protocol.consumer import FetchResponse
    from kafka.record import MemoryRecords

    decoded = FetchResponse.decode(response[4:], version=2)
    (partition,) = decoded.responses[0].partitions
    assert partition.error_code == 0
    records = MemoryRecords(bytes(partition.records))
    offsets = []
    while (batch := records.next_batch()) is not None:
        assert batch.magic == 1 and batch.validate_crc()
        for record in batch:
            assert record.value == VALUE and record.key == b"%d" % record.offset
            offsets.append(record.offset)
    assert offsets == list(range(first_offset, first_offset + len(offsets)))
    return len(offsets)


def test_a_client_that_stops_reading_is_not_read_from_and_costs_one_piece(tmp_path):
    """A Fetch v2 of 25 MB (down-converted) to a client that does not read: the broker converts
    one piece, waits for the client, and reads nothing more from it (its next request stays in
    the socket); its memory grows by far less than the response (the whole response in memory,
    as before, was 50 MB: stored and converted). Another client produces meanwhile. Then the
    client reads: every message, in order, and the answer to its next request."""
    import psutil

    broker = Broker(BrokerConfig.load(data_dir=tmp_path))
    broker.open()
    unsent = UnsentBytes()

    async def main():
        async with trio.open_nursery() as nursery:
            producer = await fill_topic(broker, nursery, unsent, "old")
            rss_before = psutil.Process().memory_info().rss
            slow, connection = await tcp_connection(broker, nursery, unsent, receive_buffer=4096)
            await slow.send(fetch_v2_request("old", 50 * MIB, 1))
            with trio.fail_after(60):
                while not connection.send_stalled:
                    await trio.sleep(0.01)
            await slow.send(request(API_VERSIONS, 0, 2))
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert 0 < connection.unsent_held <= PIECE_BOUND and unsent.in_use == connection.unsent_held
            assert unread_bytes(connection.sock) == len(request(API_VERSIONS, 0, 2))
            assert psutil.Process().memory_info().rss - rss_before < 15 * MIB

            await producer.send(produce_request("old", stored_batch(BATCHES * RECORDS_PER_BATCH), 99))
            assert produced_offset(await recv_frame(producer)) == BATCHES * RECORDS_PER_BATCH
            assert connection.send_stalled  # still waiting for the slow client

            assert check_converted(await recv_frame(slow), 0) > 20_000
            assert struct.unpack(">ih", (await recv_frame(slow))[:6]) == (2, 0)
            assert unsent.in_use == 0
            nursery.cancel_scope.cancel()

    trio.run(main)
    broker.close()


def test_the_listeners_bound_makes_a_second_slow_client_wait_for_room(tmp_path):
    """With all the room for unsent pieces taken by a client that does not read, another old
    consumer's response waits before converting anything; it goes on once the first reads."""
    broker = Broker(BrokerConfig.load(data_dir=tmp_path))
    broker.open()
    unsent = UnsentBytes(limit=1)

    async def main():
        async with trio.open_nursery() as nursery:
            await fill_topic(broker, nursery, unsent, "old")
            first, first_connection = await tcp_connection(broker, nursery, unsent, receive_buffer=4096)
            await first.send(fetch_v2_request("old", 4 * MIB, 1))
            with trio.fail_after(60):
                while not first_connection.send_stalled:
                    await trio.sleep(0.01)
            second, second_connection = await tcp_connection(broker, nursery, unsent, receive_buffer=4096)
            await second.send(fetch_v2_request("old", 4 * MIB, 2))
            with trio.fail_after(60):  # the response's head, sent before its records
                while not unread_bytes(second):
                    await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert second_connection.busy and not second_connection.send_stalled
            assert second_connection.unsent_held == 0 and unsent.in_use == first_connection.unsent_held
            assert unread_bytes(second) < 100  # no records: it waits for room

            responses = {}

            async def read(name, sock):
                responses[name] = await recv_frame(sock)

            async with trio.open_nursery() as readers:  # both at once: either may hold the room
                readers.start_soon(read, "first", first)
                readers.start_soon(read, "second", second)
            assert check_converted(responses["first"], 0) > 3000
            assert check_converted(responses["second"], 0) > 3000
            assert unsent.in_use == 0
            nursery.cancel_scope.cancel()

    trio.run(main)
    broker.close()
