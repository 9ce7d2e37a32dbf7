"""Damaged record batches a client can send (a correct CRC around records that lie) against a
real broker process: each is refused with the code Kafka's broker answers, with record_errors
naming the record (Produce v8+) where Kafka's LogValidator names one, and the partition stays
sound: the next batch gets the next offset, and confluent-kafka, kcat and kafka-python read every
acknowledged record from the start, offsets contiguous.

The batches come from kafkacompat.testing.damaged_batches (the unit tests of the validator use
the same ones); raw Produce requests are built with kafka-python's protocol classes.
"""

import json
import subprocess
import uuid

import pytest

pytest.register_assert_rewrite("clients")

from clients import (  # noqa: E402
    ConfluentDriver, KafkaPythonDriver, Msg, RawConnection, confluent_send, create_topic, offsets, values,
)

from kafkacompat.testing import damaged_batches as dmg  # noqa: E402
from kafkacompat.testing.process import BrokerProcess  # noqa: E402

KCAT = "/usr/bin/kcat"
SEED = b"seed-before-the-damage"
AFTER = b"valid-after-the-damage"


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for every damaged kind (each on its own topic): the cases must not disturb
    each other either."""
    broker = BrokerProcess(tmp_path_factory.mktemp("bad-records") / "data").start()
    yield broker
    broker.kill()


def produce(conn: RawConnection, topic: str, records: bytes, *, version: int = 9, acks: int = -1,
            transactional_id: str | None = None):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    data = ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0,
                                                                                       records=bytes(records))])
    request = ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=5000, topic_data=[data])
    if acks == 0:
        conn.send_request(request, version)
        return None
    (topic_response,) = conn.call(request, ProduceResponse, version).responses
    (partition_response,) = topic_response.partition_responses
    return partition_response


def kcat_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    done = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"kcat exited {done.returncode}: {done.stderr}"
    got = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [(m["offset"], m["payload"].encode()) for m in got]


def assert_partition_sound(bootstrap: str, topic: str) -> None:
    """Every client reads the seed at 0 and the record acknowledged after the damage at 1, and
    nothing else is there (high watermark 2; kcat reads to the end of the partition)."""
    assert ConfluentDriver(bootstrap).watermarks(topic, 0) == (0, 2)
    for driver in (ConfluentDriver(bootstrap), KafkaPythonDriver(bootstrap)):
        got = driver.consume(topic, 0, 0, 2, timeout=15)
        assert (offsets(got), values(got)) == ([0, 1], [SEED, AFTER]), type(driver).__name__
    assert kcat_consume(bootstrap, topic) == [(0, SEED), (1, AFTER)]


@pytest.mark.parametrize("name", dmg.DAMAGED.keys())
def test_damaged_batch_is_refused_and_the_partition_stays_readable(shared_broker, name):
    damaged = dmg.DAMAGED[name]
    topic = f"bad-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        seed = produce(conn, topic, dmg.batch(dmg.record(0, value=SEED), 1))
        assert (seed.error_code, seed.base_offset) == (0, 0)
        # Kafka authorizes a request carrying transactional batches by its transactional id
        # before any batch is validated (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one)
        built = damaged.build()
        transactional = len(built) > 22 and bool(built[22] & dmg.TRANSACTIONAL_FLAG)  # attributes, low byte
        refused = produce(conn, topic, built, transactional_id="bad-records" if transactional else None)
        assert refused.error_code == damaged.code, refused.error_message
        assert refused.base_offset == -1 and refused.error_message
        if damaged.per_record:
            assert refused.record_errors, "Produce v8+ names the failing record"
            (index, message), *_ = refused.record_errors
            assert index >= 0 and message
    (after,) = confluent_send(shared_broker.bootstrap, topic, [Msg(AFTER)])
    assert after == 1  # the damaged batch took no offset
    assert_partition_sound(shared_broker.bootstrap, topic)
    assert shared_broker.proc.poll() is None


REPRESENTATIVE = ("count-above-the-records", "trailing-garbage", "offset-deltas-repeat", "zstd-garbage-payload",
                  "codec-id-6", "control-batch-from-a-client")


@pytest.mark.parametrize("version", [3, 7])
@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_older_produce_versions_get_the_same_code_without_record_errors(shared_broker, name, version):
    damaged = dmg.DAMAGED[name]
    if name == "zstd-garbage-payload" and version < 7:
        expected = 76  # UNSUPPORTED_COMPRESSION_TYPE: zstd needs Produce v7, checked first
    else:
        expected = damaged.code
    topic = f"bad-v{version}-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        assert produce(conn, topic, damaged.build(), version=version).error_code == expected
        accepted = produce(conn, topic, dmg.sound(2), version=version)
        assert (accepted.error_code, accepted.base_offset) == (0, 0)


def test_damaged_batch_with_acks_0_closes_the_connection(shared_broker):
    """No response can carry the error, so Kafka closes the connection."""
    topic = f"bad-acks0-{uuid.uuid4().hex[:6]}"
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker.bootstrap) as conn:
        produce(conn, topic, dmg.DAMAGED["count-above-the-records"].build(), acks=0)
        assert conn.closed_by_broker(timeout=5)
    with RawConnection(shared_broker.bootstrap) as conn:
        assert produce(conn, topic, dmg.batch(dmg.record(0, value=SEED), 1)).base_offset == 0


def test_a_compression_bomb_is_refused_and_the_broker_keeps_serving(shared_broker):
    """Two GiB of zeros in a ~100 KiB zstd batch: refused as INVALID_RECORD once the limit is
    inflated, not held in memory."""
    topic = f"bad-bomb-{uuid.uuid4().hex[:6]}"
    create_topic(shared_broker.bootstrap, topic)
    bomb = dmg.bomb(4, 2 << 30)
    assert len(bomb) < 1 << 20
    with RawConnection(shared_broker.bootstrap) as conn:
        seed = produce(conn, topic, dmg.batch(dmg.record(0, value=SEED), 1))
        refused = produce(conn, topic, bomb)
        assert refused.error_code == dmg.INVALID_RECORD, refused.error_message
        assert "decompresses to more than" in refused.error_message
    assert seed.base_offset == 0
    assert confluent_send(shared_broker.bootstrap, topic, [Msg(AFTER)]) == [1]
    assert_partition_sound(shared_broker.bootstrap, topic)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_sound_compressed_batches_from_every_client_still_pass(shared_broker, codec):
    topic = f"codec-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(shared_broker.bootstrap, topic)
    msgs = [Msg(b"%s-%d" % (codec.encode(), i) * (i + 1), b"k%d" % i, (("h", b"v"),)) for i in range(50)]
    assert confluent_send(shared_broker.bootstrap, topic, msgs, **{"compression.codec": codec}) == list(range(50))
    assert KafkaPythonDriver(shared_broker.bootstrap).produce(topic, msgs, codec=codec) == list(range(50, 100))
    got = ConfluentDriver(shared_broker.bootstrap).consume(topic, 0, 0, 100)
    assert offsets(got) == list(range(100)) and values(got) == [m.value for m in msgs] * 2
