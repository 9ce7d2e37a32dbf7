"""Bad input over raw sockets against a real broker process.

Framing and header violations must close only the offending connection; bad record batches and
bad topic names must get the error code Kafka answers with, on a connection that stays usable.
After each case a fresh librdkafka producer and consumer must still work and the process must be
alive. Requests are built with kafka-python 3's protocol classes and record-batch builders.
"""

import struct
import time

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    Msg, RawConnection, assert_client_works, confluent_send, create_topic, fetch_request, frame, request_header,
)

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_OUT_OF_RANGE = 1
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76

PRODUCE_VERSIONS = (3, 7, 9)  # first for magic-2 batches, aiokafka/kafkajs's, first flexible


@pytest.fixture
def topic(broker, topic_name) -> str:
    confluent_send(broker.bootstrap, topic_name, [Msg(b"seed")])
    return topic_name


def assert_broker_healthy(broker, topic: str) -> None:
    assert broker.proc.poll() is None, f"broker process died:\n{broker.output()[-3000:]}"
    assert_client_works(broker.bootstrap, topic)


# ---- framing and headers -----------------------------------------------------------------


def _header_only(api_key: int, version: int, flexible: bool) -> bytes:
    return frame(request_header(api_key, version, 7, flexible=flexible) + b"\x00" * 8)


BAD_STREAMS = {
    "length-over-socket.request.max.bytes": struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 64,
    "length-int32-max": struct.pack(">i", 2**31 - 1) + b"\x00" * 64,
    "negative-length": struct.pack(">i", -1) + b"\x00" * 64,
    "http-request": b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n",
    "tls-client-hello": bytes.fromhex("16030100a5010000a10303") + b"\x00" * 32,
    "frame-shorter-than-a-header": frame(b"\x00\x03\x00"),
    "client-id-longer-than-frame": frame(struct.pack(">hhih", 3, 4, 7, 500) + b"abc"),
    "unknown-api-key": _header_only(9999, 0, False),
    "unsupported-metadata-version": _header_only(3, 99, True),
    "unsupported-produce-version": _header_only(0, 99, True),
    "metadata-body-cut-short": frame(request_header(3, 4, 7, flexible=False) + b"\x00\x00\x00\x05\x00"),
    # null (length -1) where the schema does not allow it: Kafka's readers refuse the request
    "list-offsets-null-topics": frame(request_header(2, 2, 7, flexible=False) + struct.pack(">ibi", -1, 0, -1)),
    "create-topics-null-topics": frame(request_header(19, 2, 7, flexible=False) + struct.pack(">iib", -1, 1000, 0)),
    "describe-configs-null-resources": frame(request_header(32, 1, 7, flexible=False) + struct.pack(">ib", -1, 0)),
    "alter-configs-null-config-name": frame(request_header(33, 0, 7, flexible=False) + struct.pack(
        ">ibh1sih", 1, 2, 1, b"t", 1, -1) + struct.pack(">hb", -1, 0)),
}


@pytest.mark.parametrize("payload", BAD_STREAMS.values(), ids=BAD_STREAMS.keys())
def test_bad_stream_closes_only_that_connection(broker, topic, payload):
    with RawConnection(broker.bootstrap) as bystander, RawConnection(broker.bootstrap) as conn:
        conn.send(payload)
        assert conn.closed_by_broker(timeout=5), "the broker kept a connection that sent a non-Kafka stream"
        assert_api_versions_works(bystander)
    assert_broker_healthy(broker, topic)
    assert "internal error" not in broker.output()  # refused as malformed, not by a crash in a handler


def test_truncated_frame_then_close(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        conn.send(struct.pack(">i", 100) + request_header(3, 4, 7, flexible=False))
    time.sleep(0.2)
    assert_broker_healthy(broker, topic)


def test_api_versions_at_unknown_version_answers_in_v0_layout(broker, topic):
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    with RawConnection(broker.bootstrap) as conn:
        conn.send(frame(request_header(18, 99, 4242, flexible=True) + b"\x07future\x0299\x00"))
        answer = conn.read_response(ApiVersionsResponse, 0, 4242, header_tagged=False)
        assert answer.error_code == UNSUPPORTED_VERSION
        served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert served[18][0] == 0 and served[18][1] >= 3
        assert {0, 1, 3} <= served.keys()
        # The client retries at a version we named, on the same connection.
        retry = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                          ApiVersionsResponse, version=3)
        assert retry.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in retry.api_keys} == served


def assert_api_versions_works(conn: RawConnection) -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    assert conn.call(ApiVersionsRequest(), ApiVersionsResponse, version=0).error_code == 0


def test_huge_claimed_frames_do_not_allocate_their_size(broker, topic):
    """20 connections each claim a 100 MB request (under socket.request.max.bytes, 100 MiB) and
    send 4 bytes of it. A broker that allocated what is claimed would grow by 2 GB."""
    import psutil

    process = psutil.Process(broker.pid())
    assert_client_works(broker.bootstrap, topic)  # lazy imports and caches are loaded
    before = process.memory_info().rss
    conns = [RawConnection(broker.bootstrap) for _ in range(20)]
    try:
        for conn in conns:
            conn.send(struct.pack(">i", 100_000_000) + request_header(0, 7, 1, flexible=False)[:4])
        time.sleep(1.0)
        grown = process.memory_info().rss - before
        assert grown < 200 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB for 80 bytes received"
        assert not any(conn.closed_by_broker(timeout=0.05) for conn in conns), "a valid (if slow) request was cut off"
    finally:
        for conn in conns:
            conn.sock.close()
    assert_broker_healthy(broker, topic)


# ---- record batches ----------------------------------------------------------------------


def v2_batch(count: int = 3, value_size: int = 10) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=16 * 1024 * 1024)
    now = int(time.time() * 1000)
    for i in range(count):
        builder.append(i, timestamp=now, key=f"k{i}".encode(), value=bytes([65 + i % 26]) * value_size, headers=[])
    return builder.build()


def magic1_batch() -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1024 * 1024)
    builder.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"old format")
    return bytes(builder.build())


def produce(conn: RawConnection, topic: str, records: bytes, *, version: int = 7, acks: int = -1, partition: int = 0):
    """One Produce request for one partition; returns that partition's response."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    data = ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=partition,
                                                                                       records=bytes(records))])
    request = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[data])
    if acks == 0:
        conn.send_request(request, version)
        return None
    (topic_response,) = conn.call(request, ProduceResponse, version).responses
    (partition_response,) = topic_response.partition_responses
    return partition_response


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_corrupt_crc_is_rejected_and_the_connection_stays_usable(broker, topic, version):
    corrupt = v2_batch()
    corrupt[-1] ^= 0xFF  # inside the CRC-covered records
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, corrupt, version=version).error_code == CORRUPT_MESSAGE
        accepted = produce(conn, topic, v2_batch(), version=version)
        assert (accepted.error_code, accepted.base_offset) == (0, 1)  # the corrupt batch took no offsets
    assert_broker_healthy(broker, topic)


def test_corrupt_crc_with_acks_0_closes_the_connection(broker, topic):
    """No response can carry the error, so Kafka closes the connection and the producer notices."""
    corrupt = v2_batch()
    corrupt[-1] ^= 0xFF
    with RawConnection(broker.bootstrap) as conn:
        produce(conn, topic, corrupt, acks=0)
        assert conn.closed_by_broker(timeout=5)
    assert_broker_healthy(broker, topic)


def test_magic_1_batch_is_rejected_as_invalid_record(broker, topic):
    """Kafka (KafkaApis.handleProduceRequest -> ProduceRequest.validateRecords) answers a
    v3+ Produce whose batch is not magic 2 with InvalidRecordException, i.e. INVALID_RECORD (87)."""
    with RawConnection(broker.bootstrap) as conn:
        response = produce(conn, topic, magic1_batch())
    assert response.error_code == INVALID_RECORD
    assert_broker_healthy(broker, topic)


def test_two_batches_for_one_partition_are_rejected_as_invalid_record(broker, topic):
    """Kafka's ProduceRequest.validateRecords allows exactly one batch per partition (v3+)."""
    with RawConnection(broker.bootstrap) as conn:
        response = produce(conn, topic, bytes(v2_batch()) + bytes(v2_batch()))
    assert response.error_code == INVALID_RECORD
    assert_broker_healthy(broker, topic)


def test_batch_over_the_topic_max_message_bytes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": "2000"})
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic_name, v2_batch(count=1, value_size=3000)).error_code == MESSAGE_TOO_LARGE
        fits = produce(conn, topic_name, v2_batch(count=1, value_size=1000))
        assert (fits.error_code, fits.base_offset) == (0, 0)
    assert_broker_healthy(broker, topic_name)


def test_batch_over_the_broker_message_max_bytes(broker_factory, topic_name):
    broker = broker_factory("--set", "message.max.bytes=5000")
    with RawConnection(broker.bootstrap) as conn:
        metadata(conn, topic_name)  # auto-create it
        assert produce(conn, topic_name, v2_batch(count=2, value_size=3000)).error_code == MESSAGE_TOO_LARGE
        assert produce(conn, topic_name, v2_batch(count=2, value_size=1000)).error_code == 0
    assert_broker_healthy(broker, topic_name)


# ---- topics and offsets ------------------------------------------------------------------


def metadata(conn: RawConnection, topic: str, *, version: int = 9, auto_create: bool = True):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=auto_create)
    (answer,) = conn.call(request, MetadataResponse, version).topics
    return answer


@pytest.mark.parametrize("version", [4, 9, 12])
def test_invalid_topic_name_in_metadata(broker, topic, version):
    with RawConnection(broker.bootstrap) as conn:
        for bad in ("bad topic!", "a" * 250, "..", ""):
            answer = metadata(conn, bad, version=version)
            assert (answer.name, answer.error_code, answer.partitions) == (bad, INVALID_TOPIC_EXCEPTION, [])
    assert_broker_healthy(broker, topic)


def test_unknown_topic_with_auto_create_off(broker_factory, topic_name):
    from kafka.protocol.consumer import FetchResponse

    broker = broker_factory("--set", "auto.create.topics.enable=false")
    with RawConnection(broker.bootstrap) as conn:
        assert metadata(conn, topic_name).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert produce(conn, topic_name, v2_batch()).error_code == UNKNOWN_TOPIC_OR_PARTITION
        (fetched,) = conn.call(fetch_request(topic_name, 0, 0), FetchResponse, 11).responses
        assert [p.error_code for p in fetched.partitions] == [UNKNOWN_TOPIC_OR_PARTITION]
        assert metadata(conn, topic_name).error_code == UNKNOWN_TOPIC_OR_PARTITION  # still not created
    create_topic(broker.bootstrap, topic_name)
    assert_broker_healthy(broker, topic_name)


def test_fetch_past_the_end_is_offset_out_of_range(broker, topic):
    from kafka.protocol.consumer import FetchResponse

    with RawConnection(broker.bootstrap) as conn:
        def fetch(offset):
            (fetched,) = conn.call(fetch_request(topic, 0, offset), FetchResponse, 11).responses
            (part,) = fetched.partitions
            return part

        at_end = fetch(1)
        assert (at_end.error_code, at_end.high_watermark, bytes(at_end.records or b"")) == (0, 1, b"")
        past = fetch(2)
        assert past.error_code == OFFSET_OUT_OF_RANGE
        assert fetch(-5).error_code == OFFSET_OUT_OF_RANGE
    assert_broker_healthy(broker, topic)


@pytest.mark.parametrize("version", [4, 9, 10])
def test_fetch_below_v10_from_a_zstd_topic_is_unsupported_compression(broker, topic_name, version):
    """Kafka's maybeConvertFetchedData: a consumer too old for zstd (Fetch < v10) gets
    UNSUPPORTED_COMPRESSION_TYPE from a topic configured with compression.type=zstd."""
    from kafka.protocol.consumer import FetchResponse

    create_topic(broker.bootstrap, topic_name, config={"compression.type": "zstd"})
    confluent_send(broker.bootstrap, topic_name, [Msg(b"v")])
    with RawConnection(broker.bootstrap) as conn:
        (fetched,) = conn.call(fetch_request(topic_name, 0, 0), FetchResponse, version).responses
    (part,) = fetched.partitions
    if version < 10:
        assert (part.error_code, bytes(part.records or b"")) == (UNSUPPORTED_COMPRESSION_TYPE, b"")
    else:
        assert part.error_code == 0 and part.records
