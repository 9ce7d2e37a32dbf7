"""Every API and version the broker advertises, sent with damaged bodies (bytes overwritten with
0x00/0xff/0x7f/0x80 or random values, bodies cut short): each request is answered or its
connection closed as malformed, never by a crash inside a handler, and the broker keeps serving.
A fixed seed keeps the run repeatable; about 5,000 requests.

No request may go unanswered without limit. Each one is followed on its connection by an
ApiVersions v0 probe, and by the request's bound (kafkacompat/testing/fuzz.py: the wait its own
timeout fields allow a Kafka broker, plus a 5 s slack) the broker must have answered both, or
answered the probe alone where Kafka sends no response (Produce acks=0), or closed the
connection. The broker is alone, so Produce acks=-1 and DeleteRecords have no follower to wait
for and get the slack alone, whatever their timeout_ms. The broker runs with group.initial.rebalance.delay.ms=0 and
group.max.session.timeout.ms=10000, so a damaged JoinGroup that happens to carry a valid session
timeout can hold a join (its own or a later one in the same group) for at most 10 s, not the
30 minutes Kafka's default allows. A request whose own fields allow more than a minute (a
damaged max_wait_ms or timeout_ms can say days) is waited for a minute; if it is still held then,
it is held within its own bound, as Kafka would hold it, and is not a failure.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

pytest.register_assert_rewrite("clients")
from clients import Msg, assert_client_works, confluent_send  # noqa: E402

from kafkacompat.handlers import REGISTRY  # noqa: E402
from kafkacompat.testing.fuzz import (  # noqa: E402
    ANSWERED, CLOSED, DELETE_RECORDS, DROPPED, FETCH, SLACK_S, TRIALS_PER_VERSION, UNANSWERED, Bound,
    bounded_exchange, broker_bounds, connect, damaged, default_body, exchange, frame, populated_body, request_class,
    request_header, response_class,
)
from kafkacompat.wire.frame import api_name  # noqa: E402

MAX_SESSION_MS = 10_000
TEMPLATES = {"default": default_body, "populated": populated_body}


def test_damaged_requests_of_every_api_are_answered_or_closed_within_their_bound(broker_factory, topic_name):
    """Two templates per API and version: every field at its default (empty arrays) and every
    array holding one plausible element (the target topic and group, partition 0, a valid batch),
    so the damage also reaches the handler code behind the arrays."""
    broker = broker_factory("--set", "group.initial.rebalance.delay.ms=0",
                            "--set", f"group.max.session.timeout.ms={MAX_SESSION_MS}")
    bounds = broker_bounds(single_broker=True, initial_delay_ms=0, max_session_ms=MAX_SESSION_MS)
    rng = random.Random(20261201)
    outcomes: Counter[str] = Counter()
    late: list[str] = []
    for template, body_of in TEMPLATES.items():
        for api_key, handler in sorted(REGISTRY.items()):
            for version in range(handler.min_version, handler.max_version + 1):
                body = body_of(api_key, version)
                for trial in range(TRIALS_PER_VERSION):
                    request = damaged(body, trial, rng)
                    bound = bounds.of(api_key, version, request)
                    with connect(broker.bootstrap) as sock:
                        header = request_header(api_key, version, 1000 + trial)
                        outcome, _ = bounded_exchange(sock, frame(header + request), bound)
                    outcomes[outcome] += 1
                    if outcome in (UNANSWERED, DROPPED):
                        late.append(f"{template} {api_name(api_key)} v{version} trial {trial}: {outcome} within "
                                    f"{bound.seconds:.1f} s ({bound.why}); body {request.hex()}")
    assert not late, "\n".join(late[:20])
    assert outcomes[ANSWERED] > 400 and outcomes[CLOSED] > 400, outcomes
    crashes = [line for line in broker.output().splitlines() if "internal error" in line]
    assert not crashes, "\n".join(crashes[:10])
    assert_client_works(broker.bootstrap, topic_name)


@pytest.mark.parametrize("version", [0, 3, 4, 11, 12, 15])
def test_fetch_naming_no_partition_is_answered_without_waiting_its_max_wait(broker, version):
    """Kafka's ReplicaManager.fetchMessages answers a fetch that asks for no partition at once
    (fetchInfos.isEmpty): nothing could ever satisfy its min_bytes. The damaged-request fuzz above
    found such fetches held for their whole max_wait_ms (hours, from mutated bytes)."""
    body = bytes(request_class(FETCH)(max_wait_ms=600_000, min_bytes=1, topics=[]).encode(version=version))
    with connect(broker.bootstrap) as sock:
        outcome, responses = exchange(sock, frame(request_header(FETCH, version, 1) + body),
                                      Bound(SLACK_S, True, "a fetch of nothing"))
    assert outcome == ANSWERED and len(responses) == 1


NOT_LEADER_OR_FOLLOWER = 6


def test_fetch_claiming_the_leaders_own_replica_id_does_not_hold_back_delete_records(broker, topic_name):
    """A Fetch whose replica id is the leader's own broker id is not a follower's (Kafka's
    Partition.followerReplicaOrThrow knows only remote replicas: NOT_LEADER_OR_FOLLOWER). The
    hostile runner found such a fetch (a populated template, replica id 0) recorded as a follower
    of broker 0 with log start -1, after which a DeleteRecords waited its whole timeout_ms for that
    phantom follower's low watermark and answered REQUEST_TIMED_OUT."""
    confluent_send(broker.bootstrap, topic_name, [Msg(b"one"), Msg(b"two")])
    fetch_cls, delete_cls = request_class(FETCH), request_class(DELETE_RECORDS)
    partition = fetch_cls.FetchTopic.FetchPartition(partition=0, fetch_offset=0, log_start_offset=-1,
                                                    partition_max_bytes=1 << 20)
    fetch = fetch_cls(replica_id=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                      topics=[fetch_cls.FetchTopic(topic=topic_name, partitions=[partition])])
    deletion = delete_cls(timeout_ms=60_000, topics=[delete_cls.DeleteRecordsTopic(
        name=topic_name, partitions=[delete_cls.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0,
                                                                                          offset=1)])])
    with connect(broker.bootstrap) as sock:
        outcome, (fetched,) = exchange(sock, frame(request_header(FETCH, 11, 1) + bytes(fetch.encode(version=11))),
                                       Bound(SLACK_S, True, "a fetch with max_wait_ms 0"))
        assert outcome == ANSWERED
        ((fetched_partition,),) = [t.partitions for t in response_class(FETCH).decode(
            memoryview(fetched)[4:], version=11).responses]
        assert fetched_partition.error_code == NOT_LEADER_OR_FOLLOWER
        outcome, (deleted,) = exchange(
            sock, frame(request_header(DELETE_RECORDS, 1, 2) + bytes(deletion.encode(version=1))),
            Bound(SLACK_S, True, "one broker: its own log start is the low watermark"))
    assert outcome == ANSWERED
    ((deleted_partition,),) = [t.partitions for t in response_class(DELETE_RECORDS).decode(
        memoryview(deleted)[4:], version=1).topics]
    assert (deleted_partition.error_code, deleted_partition.low_watermark) == (0, 1)
