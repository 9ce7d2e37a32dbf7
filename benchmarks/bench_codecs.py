"""Micro-benchmark of the hot-path codecs and the generated control-plane codecs against
kafka-python 3 (and kio where it helps).

    python benchmarks/bench_codecs.py

Prints microseconds per call; figures only, nothing is asserted.
"""

from __future__ import annotations

import io
import os
import tempfile
import timeit
import uuid
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

from kafka.protocol.consumer import FetchRequest, FetchResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse  # noqa: E402
from kafka.protocol.metadata import MetadataResponse  # noqa: E402

from kafkacompat.wire import codec  # noqa: E402
from kafkacompat.wire.chunks import FileRegion  # noqa: E402
from kafkacompat.wire.fetch import (  # noqa: E402
    FetchPartitionResult,
    FetchTopicResult,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_response,
)
from kafkacompat.wire.produce import (  # noqa: E402
    ProducePartitionResult,
    ProduceTopicResult,
    decode_produce_request,
    encode_produce_response,
)

MIB = 1 << 20
RECORDS = os.urandom(MIB)
TOPIC_ID = uuid.uuid4()


def per_call_us(func) -> float:
    timer = timeit.Timer(func)
    number, _ = timer.autorange()
    best = min(timer.repeat(repeat=5, number=number))
    return best / number * 1e6


def report(label: str, ours, theirs=None, kio=None) -> None:
    line = f"{label:<58} ours {per_call_us(ours):9.2f} us"
    if theirs is not None:
        line += f"   kafka-python {per_call_us(theirs):9.2f} us"
    if kio is not None:
        line += f"   kio {per_call_us(kio):9.2f} us"
    print(line)


def kio_reader(module: str, name: str):
    try:
        import importlib

        from kio.serial import entity_reader

        return entity_reader(getattr(importlib.import_module(module), name))
    except ImportError:
        return None


def bench_produce(version: int) -> None:
    topic_cls = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        version=version, transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[topic_cls(name="orders", topic_id=TOPIC_ID,
                              partition_data=[topic_cls.PartitionProduceData(index=0, records=RECORDS)])],
    )
    body = bytearray(request.encode(version=version))
    view = memoryview(body)
    kio_read = kio_reader(f"kio.schema.produce.v{version}.request", "ProduceRequest")
    frozen = bytes(body)
    report(
        f"ProduceRequest v{version} decode, 1 MiB records",
        lambda: decode_produce_request(view, version),
        lambda: ProduceRequest.decode(view, version=version),
        (lambda: kio_read(frozen, 0)) if kio_read else None,
    )

    results = [ProduceTopicResult("orders", TOPIC_ID, [ProducePartitionResult(0, 0, 123456, -1, 0)])]
    response_cls = ProduceResponse.TopicProduceResponse
    theirs = ProduceResponse(
        version=version, throttle_time_ms=0,
        responses=[response_cls(name="orders", topic_id=TOPIC_ID, partition_responses=[
            response_cls.PartitionProduceResponse(index=0, error_code=0, base_offset=123456,
                                                   log_append_time_ms=-1, log_start_offset=0)])],
    )
    report(
        f"ProduceResponse v{version} encode, 1 partition",
        lambda: encode_produce_response(results, 0, version),
        lambda: theirs.encode(version=version),
    )


def bench_fetch(version: int, region_file: int) -> None:
    records_bytes = [FetchTopicResult("orders", TOPIC_ID, [
        FetchPartitionResult(0, 0, MIB, MIB, 0, None, -1, [RECORDS], MIB)])]
    region = FileRegion(region_file, 0, MIB)  # not closed per call: the benchmark reuses it
    records_region = [FetchTopicResult("orders", TOPIC_ID, [
        FetchPartitionResult(0, 0, MIB, MIB, 0, None, -1, [region], MIB)])]
    topic_cls = FetchResponse.FetchableTopicResponse
    theirs = FetchResponse(
        version=version, throttle_time_ms=0, error_code=0, session_id=0,
        responses=[topic_cls(topic="orders", topic_id=TOPIC_ID, partitions=[topic_cls.PartitionData(
            partition_index=0, error_code=0, high_watermark=MIB, last_stable_offset=MIB, log_start_offset=0,
            aborted_transactions=None, records=RECORDS)])],
    )
    report(
        f"FetchResponse v{version} encode, 1 MiB records (bytes chunk)",
        lambda: encode_fetch_response(records_bytes, version=version),
        lambda: theirs.encode(version=version),
    )
    report(
        f"FetchResponse v{version} encode, 1 MiB records (FileRegion)",
        lambda: encode_fetch_response(records_region, version=version),
    )
    encoded = memoryview(bytearray(theirs.encode(version=version)))
    kio_read = kio_reader(f"kio.schema.fetch.v{version}.response", "FetchResponse")
    frozen = bytes(encoded)
    report(
        f"FetchResponse v{version} decode (follower), 1 MiB records",
        lambda: decode_fetch_response(encoded, version),
        lambda: FetchResponse.decode(encoded, version=version),
        (lambda: kio_read(frozen, 0)) if kio_read else None,
    )

    many = [FetchTopicResult(f"topic-{t}", TOPIC_ID, [
        FetchPartitionResult(p, 0, 100, 100, 0, None, -1, [RECORDS[: 16 * 1024]]) for p in range(10)])
        for t in range(10)]
    theirs_many = FetchResponse(
        version=version, throttle_time_ms=0, error_code=0, session_id=0,
        responses=[topic_cls(topic=t.name, topic_id=TOPIC_ID, partitions=[topic_cls.PartitionData(
            partition_index=p.index, error_code=0, high_watermark=100, last_stable_offset=100, log_start_offset=0,
            aborted_transactions=None, records=RECORDS[: 16 * 1024]) for p in t.partitions]) for t in many],
    )
    report(
        f"FetchResponse v{version} encode, 100 partitions x 16 KiB",
        lambda: encode_fetch_response(many, version=version),
        lambda: theirs_many.encode(version=version),
    )

    request_topic = FetchRequest.FetchTopic
    request = FetchRequest(
        version=version, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=50 * MIB, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id="",
        topics=[request_topic(topic=f"topic-{t}", topic_id=TOPIC_ID, partitions=[
            request_topic.FetchPartition(partition=p, current_leader_epoch=0, fetch_offset=1000, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=MIB) for p in range(10)])
            for t in range(10)],
        forgotten_topics_data=[],
    )
    request_body = memoryview(bytearray(request.encode(version=version)))
    report(
        f"FetchRequest v{version} decode, 100 partitions",
        lambda: decode_fetch_request(request_body, version),
        lambda: FetchRequest.decode(request_body, version=version),
    )


def bench_control_plane() -> None:
    heartbeat = bytes(HeartbeatRequest(version=4, group_id="group-1", generation_id=7, member_id="member-" + "x" * 36,
                                       group_instance_id=None).encode(version=4))
    ours_response = codec.new_response(12, 4, throttle_time_ms=0, error_code=0)
    theirs_response = HeartbeatResponse(version=4, throttle_time_ms=0, error_code=0)
    report(
        "HeartbeatRequest v4 decode + HeartbeatResponse v4 encode",
        lambda: (codec.decode_request(12, 4, heartbeat), codec.encode_response(ours_response, 4)),
        lambda: (HeartbeatRequest.decode(heartbeat, version=4), theirs_response.encode(version=4)),
    )

    cls = codec.response_class(3)
    topic_cls, broker_cls = cls.MetadataResponseTopic, cls.MetadataResponseBroker
    ours = cls(throttle_time_ms=0, cluster_id="cluster", controller_id=1,
               brokers=[broker_cls(node_id=n, host=f"broker-{n}", port=9092, rack=None) for n in range(3)],
               topics=[topic_cls(error_code=0, name=f"topic-{t}", topic_id=TOPIC_ID, partitions=[
                   topic_cls.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=p % 3,
                                                       leader_epoch=4, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2])
                   for p in range(4)]) for t in range(100)])
    kp_topic, kp_broker = MetadataResponse.MetadataResponseTopic, MetadataResponse.MetadataResponseBroker
    theirs = MetadataResponse(
        version=12, throttle_time_ms=0, cluster_id="cluster", controller_id=1, authorized_operations=None,
        brokers=[kp_broker(node_id=n, host=f"broker-{n}", port=9092, rack=None) for n in range(3)],
        topics=[kp_topic(error_code=0, name=f"topic-{t}", topic_id=TOPIC_ID, is_internal=False,
                         authorized_operations=None,
                         partitions=[kp_topic.MetadataResponsePartition(
                             error_code=0, partition_index=p, leader_id=p % 3, leader_epoch=4, replica_nodes=[0, 1, 2],
                             isr_nodes=[0, 1, 2], offline_replicas=[]) for p in range(4)]) for t in range(100)])
    assert codec.encode_response(ours, 12) == bytes(theirs.encode(version=12))
    report(
        "MetadataResponse v12 encode, 100 topics x 4 partitions",
        lambda: codec.encode_response(ours, 12),
        lambda: theirs.encode(version=12),
    )


def main() -> None:
    bench_control_plane()
    for version in (3, 9, 13):
        bench_produce(version)
    with tempfile.TemporaryFile() as handle:
        handle.write(RECORDS)
        handle.flush()
        for version in (4, 12, 16):
            bench_fetch(version, handle.fileno())


if __name__ == "__main__":
    main()
