"""What Kafka's LogValidator changes in a client's batch before it is stored, against a real broker
process with real clients: a topic's compression.type (and its levels) recompresses batches, an
impossible maxTimestamp (Sarama < 1.27 sends -1) is recomputed so ListOffsets by timestamp and the
time index work, and message.timestamp.before/after.max.ms refuse records outside the window.
Raw requests (``RawConnection``) send what clients cannot be made to send; every stored batch is
read back with kafka-python's record reader, every record with real consumers.
"""

from __future__ import annotations

import struct
import time

import crc32c
import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    BASE_TIMESTAMP, CODEC_IDS, SAMPLE, ConfluentDriver, KafkaPythonDriver, Msg, RawConnection, admin, create_topic,
    drop_admin_clients, fetch_request, stored_batches,
)
from test_idempotence import (  # noqa: E402,F401 - proxied is a fixture
    PARTITIONS, assert_exactly_once_in_order, confluent_produce, init_producer_id, proxied, read_back,
)

MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_COMPRESSION_TYPE = 76
HOUR_MS = 3_600_000
B = BASE_TIMESTAMP


# ---- raw requests ----------------------------------------------------------------------------------


def client_batch(timestamps, *, codec: int = 0, max_timestamp: int | None = None, producer=(-1, -1, -1),
                 values=None) -> bytes:
    """One batch as kafka-python's producer builds it (values compressible, so a codec is really
    used); ``max_timestamp`` overwrites the header's maxTimestamp and redoes the CRC (what Sarama
    1.22 sends: -1)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                        batch_size=1 << 22)
    for i, timestamp in enumerate(timestamps):
        value = values[i] if values is not None else b"v%d " % i + b"compressible " * 20
        builder.append(i, timestamp=timestamp, key=b"k%d" % i, value=value, headers=[("h", b"%d" % i)])
    batch = bytearray(builder.build())
    if max_timestamp is not None:
        struct.pack_into(">q", batch, 35, max_timestamp)
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def raw_produce(bootstrap: str, topic: str, records: bytes, *, version: int = 9):
    """One Produce request (acks=all) for partition 0; returns that partition's response."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=records)])])
    with RawConnection(bootstrap) as conn:
        (topic_response,) = conn.call(request, ProduceResponse, version).responses
    (partition,) = topic_response.partition_responses
    return partition


def stored(bootstrap: str, topic: str):
    """[(CRC valid, codec, (base offset, last offset, first timestamp, max timestamp, producer id,
    epoch, base sequence), [(offset, timestamp, key, value, headers)])] of the stored batches, read
    with a raw Fetch v11 and kafka-python's reader."""
    from kafka.protocol.consumer import FetchResponse
    from kafka.record import MemoryRecords

    with RawConnection(bootstrap) as conn:
        response = conn.call(fetch_request(topic, 0, 0), FetchResponse, version=11)
    (part,) = response.responses[0].partitions
    assert part.error_code == 0
    records = MemoryRecords(bytes(part.records or b""))
    found = []
    while (batch := records.next_batch()) is not None:
        crc_valid = batch.validate_crc()  # before iterating, as kafka-python requires
        fields = (batch.base_offset, batch.last_offset, batch.first_timestamp, batch.max_timestamp,
                  batch.producer_id, batch.producer_epoch, batch.base_sequence)
        found.append((crc_valid, batch.compression_type, fields,
                      [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in batch]))
    return found


def offsets_for_times(broker, topic: str, *timestamps: int) -> list[tuple[int, int]]:
    """(offset, timestamp) per timestamp through confluent-kafka's AdminClient.list_offsets
    (ListOffsets), with the max-timestamp spec last."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    client = admin(broker)
    tp = TopicPartition(topic, 0)
    answers = []
    for spec in [OffsetSpec.for_timestamp(t) for t in timestamps] + [OffsetSpec.max_timestamp()]:
        result = client.list_offsets({tp: spec})[tp].result(timeout=15)
        answers.append((result.offset, result.timestamp))
    return answers


# ---- an impossible maxTimestamp --------------------------------------------------------------------

OUT_OF_ORDER = [B, B + 2000, B + 1000, B + 3000, B + 500]


@pytest.mark.parametrize("codec", [0, 1, 3])
@pytest.mark.parametrize("version", [3, 9])
def test_an_impossible_max_timestamp_is_recomputed_and_listoffsets_finds_the_records(broker, topic_name, codec,
                                                                                       version):
    create_topic(broker.bootstrap, topic_name)
    sent = client_batch(OUT_OF_ORDER, codec=codec, max_timestamp=-1)
    response = raw_produce(broker.bootstrap, topic_name, sent, version=version)
    assert (response.error_code, response.base_offset) == (0, 0)
    ((crc_valid, stored_codec, fields, records),) = stored(broker.bootstrap, topic_name)
    assert crc_valid and stored_codec == codec
    assert fields[2:4] == (B, B + 3000)
    assert [r[1] for r in records] == OUT_OF_ORDER
    expected = [(0, B), (1, B + 2000), (3, B + 3000), (-1, -1), (3, B + 3000)]
    queries = (B - 1, B + 1500, B + 2500, B + 3001)
    assert offsets_for_times(broker, topic_name, *queries) == expected
    assert KafkaPythonDriver(broker.bootstrap).offset_for_time(topic_name, 0, B + 2500) == 3
    # From disk: the time index and segment state after a clean stop, and after a crash (recovery
    # rebuilds the indexes from the stored batch headers).
    broker.restart()
    drop_admin_clients()  # a fresh client for the restarted broker
    assert offsets_for_times(broker, topic_name, *queries) == expected
    broker.kill()
    broker.start()
    drop_admin_clients()
    assert offsets_for_times(broker, topic_name, *queries) == expected


def test_a_correct_batch_is_stored_byte_for_byte(broker, topic_name):
    """The common path: no repair, no recompression; the stored records section is the sent one."""
    create_topic(broker.bootstrap, topic_name)
    sent = client_batch(OUT_OF_ORDER, codec=1)
    assert raw_produce(broker.bootstrap, topic_name, sent).error_code == 0
    from kafka.protocol.consumer import FetchResponse

    with RawConnection(broker.bootstrap) as conn:
        part = conn.call(fetch_request(topic_name, 0, 0), FetchResponse, version=11).responses[0].partitions[0]
    assert bytes(part.records)[21:] == sent[21:]  # everything the CRC covers


def test_a_log_append_time_topic_stamps_the_batch_whatever_its_max_timestamp(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert raw_produce(broker.bootstrap, topic_name, client_batch(OUT_OF_ORDER, max_timestamp=-1)).error_code == 0
    ((crc_valid, _, fields, records),) = stored(broker.bootstrap, topic_name)
    assert crc_valid and before <= fields[3] <= int(time.time() * 1000)
    assert {r[1] for r in records} == {fields[3]}  # readers report the append time for every record


# ---- compression.type ------------------------------------------------------------------------------

DRIVERS = {"confluent-kafka": ConfluentDriver, "kafka-python": KafkaPythonDriver}


@pytest.mark.parametrize("producer_codec, topic_codec", [
    ("lz4", "gzip"), ("none", "zstd"), ("gzip", "snappy"), ("zstd", "lz4"), ("snappy", "uncompressed"),
    ("gzip", "uncompressed"), ("none", "gzip"),
])
@pytest.mark.parametrize("producer", DRIVERS)
def test_the_topic_codec_is_what_gets_stored_and_consumers_read_the_same_records(
        broker, topic_name, producer, producer_codec, topic_codec):
    create_topic(broker.bootstrap, topic_name, config={"compression.type": topic_codec})
    msgs = [Msg(m.value, m.key, m.headers, B + i) for i, m in enumerate(SAMPLE)]
    assert DRIVERS[producer](broker.bootstrap).produce(topic_name, msgs, codec=producer_codec) == \
        list(range(len(msgs)))
    ((crc_valid, codec, fields, _),) = stored(broker.bootstrap, topic_name)
    assert crc_valid and codec == CODEC_IDS.get(topic_codec, 0)
    assert (fields[0], fields[1], fields[2], fields[3]) == (0, len(msgs) - 1, B, B + len(msgs) - 1)
    for consumer in DRIVERS.values():
        got = consumer(broker.bootstrap).consume(topic_name, 0, 0, len(msgs))
        assert [r.msg(with_timestamp=True) for r in got] == msgs, consumer.name
        assert [r.offset for r in got] == list(range(len(msgs)))


def test_the_producer_setting_keeps_each_batch_codec(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "producer"})
    driver = ConfluentDriver(broker.bootstrap)
    for codec in ("gzip", "none", "lz4"):
        driver.produce(topic_name, SAMPLE, codec=codec)
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [1, 0, 3]


def test_recompression_uses_the_topic_compression_level(broker, topic_name):
    """KIP-390: compression.gzip.level; level 1 stores a larger batch than level 9, both readable."""
    sizes = {}
    values = [(b"level %d " % (i % 13)) * 200 + bytes(range(i % 97)) for i in range(200)]
    for level in (1, 9):
        topic = f"{topic_name}-{level}"
        create_topic(broker.bootstrap, topic, config={"compression.type": "gzip",
                                                      "compression.gzip.level": str(level)})
        assert raw_produce(broker.bootstrap, topic, client_batch([B] * 200, values=values)).error_code == 0
        ((crc_valid, codec, _, records),) = stored(broker.bootstrap, topic)
        assert crc_valid and codec == 1 and [r[3] for r in records] == values
        from kafka.protocol.consumer import FetchResponse

        with RawConnection(broker.bootstrap) as conn:
            part = conn.call(fetch_request(topic, 0, 0), FetchResponse, version=11).responses[0].partitions[0]
        sizes[level] = len(part.records)
    assert sizes[1] > sizes[9]


def test_the_broker_compression_type_is_the_default_for_topics(broker_factory, topic_name):
    broker = broker_factory("--set", "compression.type=lz4")
    create_topic(broker.bootstrap, topic_name)
    create_topic(broker.bootstrap, f"{topic_name}-own", config={"compression.type": "producer"})
    ConfluentDriver(broker.bootstrap).produce(topic_name, SAMPLE, codec="gzip")
    ConfluentDriver(broker.bootstrap).produce(f"{topic_name}-own", SAMPLE, codec="gzip")
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [3]
    assert [b.compression for b in stored_batches(broker.bootstrap, f"{topic_name}-own")] == [1]


def test_a_batch_that_grows_past_max_message_bytes_when_rebuilt_is_refused(broker, topic_name):
    """Kafka re-checks max.message.bytes after recompression (RecordTooLargeException)."""
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "uncompressed",
                                                       "max.message.bytes": "4000"})
    big = client_batch([B] * 10, codec=1, values=[bytes(1000)] * 10)
    assert len(big) < 4000
    response = raw_produce(broker.bootstrap, topic_name, big)
    assert response.error_code == MESSAGE_TOO_LARGE and "exceeds the maximum configured size" in response.error_message
    assert stored_batches(broker.bootstrap, topic_name) == []
    assert raw_produce(broker.bootstrap, topic_name, client_batch([B], codec=1)).error_code == 0
    assert [b.compression for b in stored_batches(broker.bootstrap, topic_name)] == [0]


def test_produce_below_v7_to_a_zstd_topic_is_stored_zstd(broker, topic_name):
    """Kafka limits only the codec of the batch a request carries by its version (zstd needs
    Produce v7); the topic's target codec is applied whatever the version, and old fetchers are the
    ones refused (Fetch < v10 from a zstd topic)."""
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "zstd"})
    assert raw_produce(broker.bootstrap, topic_name, client_batch(OUT_OF_ORDER), version=3).error_code == 0
    refused = raw_produce(broker.bootstrap, topic_name, client_batch(OUT_OF_ORDER, codec=4), version=3)
    assert refused.error_code == UNSUPPORTED_COMPRESSION_TYPE
    ((crc_valid, codec, _, records),) = stored(broker.bootstrap, topic_name)
    assert crc_valid and codec == 4 and [r[1] for r in records] == OUT_OF_ORDER


def test_an_idempotent_batch_keeps_its_producer_fields_and_retries_still_dedupe(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"compression.type": "gzip"})
    with RawConnection(broker.bootstrap) as conn:
        pid = init_producer_id(conn, 4).producer_id
    first = client_batch([B, B + 1, B + 2], producer=(pid, 0, 0))
    second = client_batch([B + 3, B + 4], producer=(pid, 0, 3), max_timestamp=-1)
    answers = [(r.error_code, r.base_offset) for r in (
        raw_produce(broker.bootstrap, topic_name, first),
        raw_produce(broker.bootstrap, topic_name, first),  # a retry: acknowledged, not written
        raw_produce(broker.bootstrap, topic_name, second),
        raw_produce(broker.bootstrap, topic_name, second),
        raw_produce(broker.bootstrap, topic_name, client_batch([B], producer=(pid, 0, 9))),  # a gap
    )]
    assert answers == [(0, 0), (0, 0), (0, 3), (0, 3), (45, -1)]  # 45: OUT_OF_ORDER_SEQUENCE_NUMBER
    batches = stored(broker.bootstrap, topic_name)
    assert [(crc, codec, fields) for crc, codec, fields, _ in batches] == [
        (True, 1, (0, 2, B, B + 2, pid, 0, 0)),
        (True, 1, (3, 4, B + 3, B + 4, pid, 0, 3)),
    ]
    got = ConfluentDriver(broker.bootstrap).consume(topic_name, 0, 0, 5)
    assert [(r.offset, r.value[:3], r.timestamp) for r in got] == [
        (i, b"v%d " % (i if i < 3 else i - 3), B + i) for i in range(5)]


def test_librdkafka_idempotent_exactly_once_through_a_lossy_proxy_to_a_recompressing_topic(proxied, topic_name):
    proxy, broker = proxied
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS, config={"compression.type": "lz4"})
    count = 20_000
    confluent_produce(proxy, topic_name, count)
    assert proxy.stats.dropped_responses > 0, proxy.stats
    proxy.faults = False
    assert_exactly_once_in_order(read_back(proxy.bootstrap, topic_name, count), count)
    assert {b.compression for b in stored_batches(broker.bootstrap, topic_name)} == {3}


# ---- message.timestamp.before.max.ms / after.max.ms ------------------------------------------------


@pytest.mark.parametrize("config", [
    {"message.timestamp.before.max.ms": str(HOUR_MS), "message.timestamp.after.max.ms": str(HOUR_MS)},
    {"message.timestamp.difference.max.ms": str(HOUR_MS)},  # deprecated: both sides
])
def test_records_outside_the_timestamp_window_are_refused_and_named(broker, topic_name, config):
    create_topic(broker.bootstrap, topic_name, config=config)
    now = int(time.time() * 1000)
    late, early = now + 2 * HOUR_MS, now - 2 * HOUR_MS
    response = raw_produce(broker.bootstrap, topic_name, client_batch([now, late, now + 1, early]))
    assert response.error_code == INVALID_TIMESTAMP
    assert response.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in response.record_errors] == [1, 3]
    assert f"Timestamp {late} of message with offset 1 is out of range" in response.record_errors[0].batch_index_error_message
    # Sarama's -1 maxTimestamp hides nothing: the max is recomputed before the check.
    assert raw_produce(broker.bootstrap, topic_name,
                       client_batch([now, late], max_timestamp=-1)).error_code == INVALID_TIMESTAMP
    assert stored_batches(broker.bootstrap, topic_name) == []
    assert raw_produce(broker.bootstrap, topic_name, client_batch([now, now + 1000, now - 1000])).error_code == 0
    assert [b.records for b in stored_batches(broker.bootstrap, topic_name)] == [3]


def test_a_client_producing_old_timestamps_to_a_limited_topic_gets_invalid_timestamp(broker, topic_name):
    from confluent_kafka import KafkaError, Producer

    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.before.max.ms": str(HOUR_MS)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100, "enable.idempotence": False,
                         "retries": 0})
    reports = []
    producer.produce(topic_name, value=b"old", timestamp=B, on_delivery=lambda err, msg: reports.append(err))
    producer.produce(topic_name, value=b"new", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(15) == 0
    assert [err.code() if err else None for err in reports] == [KafkaError.INVALID_TIMESTAMP] * 2  # one batch
    ConfluentDriver(broker.bootstrap).produce(topic_name, [Msg(b"new")])
    assert [b.records for b in stored_batches(broker.bootstrap, topic_name)] == [1]
