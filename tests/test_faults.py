"""Fault injection (kafkacompat/faults.py): the error response of every API and version the broker
serves carries the injected code where that response has error codes, and fault descriptions
that cannot be applied are refused with the valid names."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from kafkacompat.faults import FaultInjector, FaultSpecError, generic_error_response, request_partitions
from kafkacompat.handlers import REGISTRY
from kafkacompat.testing import fuzz
from kafkacompat.wire import codec
from kafkacompat.wire.fetch import decode_fetch_response
from kafkacompat.wire.frame import RequestHeader

CODE = 6  # NOT_LEADER_OR_FOLLOWER


def _error_codes(message) -> list[int]:
    found: list[int] = []
    stack = [message]
    while stack:
        item = stack.pop()
        if dataclasses.is_dataclass(item):
            for field in dataclasses.fields(item):
                value = getattr(item, field.name)
                if field.name == "error_code" or field.name.endswith("_error_code"):
                    found.append(value)
                stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def _request(api_key: int, version: int):
    """The fuzzer's populated request (every array one element) decoded by the broker's decoder."""
    handler = REGISTRY[api_key]
    return handler.decode(version, memoryview(bytearray(fuzz.populated_body(api_key, version))))


def _served_with_bodies():
    for api_key, handler in sorted(REGISTRY.items()):
        for version in range(handler.min_version, handler.max_version + 1):
            if fuzz.encodable(api_key, version):
                try:
                    _request(api_key, version)
                except ValueError:
                    continue  # a populated body this handler refuses (ACL filters of UNKNOWN type)
                yield api_key, version


def _error_response(api_key: int, version: int, request):
    handler = REGISTRY[api_key]
    if handler.error_response is not None:
        return handler.error_response(request, CODE)
    return generic_error_response(api_key, version, request, CODE)


def _encoded(api_key: int, version: int, response) -> bytes:
    encoded = REGISTRY[api_key].encode(response, version)
    return encoded if isinstance(encoded, bytes) else b"".join(bytes(chunk) for chunk in encoded)


@pytest.mark.parametrize("api_key,version", list(_served_with_bodies()))
def test_every_served_api_answers_an_injected_error_where_its_response_carries_one(api_key, version):
    request = _request(api_key, version)
    body = _encoded(api_key, version, _error_response(api_key, version, request))
    if api_key == 1:
        decoded = decode_fetch_response(memoryview(body), version)
        codes = [p.error_code for t in decoded.topics for p in t.partitions] + [decoded.error_code]
    elif codec.valid_versions(api_key)[1] >= version:
        codes = _error_codes(codec.decode_response(api_key, version, body))
    else:
        return  # a version newer than the generated specs (Produce v12+): the hot-path codec wrote it
    assert CODE in codes


@pytest.mark.parametrize("version", [3, 9, 11])
def test_produce_error_goes_in_every_partition_and_nothing_else(version):
    request = _request(0, version)
    request.topics[0].partitions.append(dataclasses.replace(request.topics[0].partitions[0], index=7))
    decoded = codec.decode_response(0, version, _encoded(0, version, _error_response(0, version, request)))
    partitions = [(t.name, p.index, p.error_code) for t in decoded.responses for p in t.partition_responses]
    name = request.topics[0].name
    assert partitions == [(name, request.topics[0].partitions[0].index, CODE), (name, 7, CODE)]


def test_fetch_error_is_at_the_top_and_in_every_partition():
    request = _request(1, 12)
    decoded = decode_fetch_response(memoryview(_encoded(1, 12, _error_response(1, 12, request))), 12)
    assert decoded.error_code == CODE
    assert [(t.name, [p.error_code for p in t.partitions]) for t in decoded.topics] == [
        (request.topics[0].name, [CODE] * len(request.topics[0].partitions))]


@pytest.mark.parametrize("api_key,version", [(2, 7), (8, 8), (9, 7), (23, 4), (21, 2)])
def test_partitioned_responses_mirror_the_request_partitions(api_key, version):
    request = _request(api_key, version)
    named = request_partitions(request, _NoMetadata())
    response = codec.decode_response(api_key, version, _encoded(api_key, version,
                                                                 _error_response(api_key, version, request)))
    assert named and all(partition is not None for _, partition in named)
    assert _error_codes(response).count(CODE) >= len(named)


class _NoMetadata:
    def topic_by_id(self, topic_id: uuid.UUID):
        return None


def test_find_coordinator_v4_puts_the_error_in_each_coordinator_not_the_top():
    request = codec.request_class(10)(key_type=0, coordinator_keys=["g1", "g2"])
    response = codec.decode_response(10, 4, _encoded(10, 4, _error_response(10, 4, request)))
    assert [(c.key, c.error_code) for c in response.coordinators] == [("g1", CODE), ("g2", CODE)]
    assert response.error_code == 0


# ---- matching and counting ------------------------------------------------------------------


def _header(api_key: int, client_id: str | None = "app") -> RequestHeader:
    return RequestHeader(api_key, 9, 1, client_id, True)


def test_a_fault_matches_its_count_of_requests_then_nothing():
    faults = FaultInjector()
    fault = faults.add({"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "count": 2}, REGISTRY)
    request = _request(0, 9)
    assert faults.take(_header(3), request, _NoMetadata()) is None  # another API
    assert faults.take(_header(0), request, _NoMetadata()) is fault
    assert faults.take(_header(0), request, _NoMetadata()) is fault
    assert faults.take(_header(0), request, _NoMetadata()) is None
    assert (fault.remaining, fault.matched, faults.active) == (0, 2, False)
    assert fault.to_json()["count"] == 2


def test_topic_partition_and_client_filters():
    faults = FaultInjector()
    request = _request(0, 9)
    topic = request.topics[0].name
    index = request.topics[0].partitions[0].index
    faults.add({"api": 0, "error": 6, "topic": "other"}, REGISTRY)
    faults.add({"api": 0, "error": 6, "topic": topic, "partition": index + 1}, REGISTRY)
    faults.add({"api": 0, "error": 6, "client_id": "someone-else"}, REGISTRY)
    assert faults.take(_header(0), request, _NoMetadata()) is None
    wanted = faults.add({"api": 0, "error": 6, "topic": topic, "partition": index, "client_id": "app"}, REGISTRY)
    assert faults.take(_header(0), request, _NoMetadata()) is wanted


@pytest.mark.parametrize("spec,message", [
    ({"api": "Prod", "error": 6}, "valid apis: Produce, Fetch"),
    ({"api": 999, "error": 6}, "does not serve api key 999"),
    ({"error": 6}, "api is required"),
    ({"api": "Produce", "error": "NOT_A_LEADER"}, "valid errors: UNKNOWN_SERVER_ERROR"),
    ({"api": "Produce", "error": 0}, "unknown error code 0"),
    ({"api": "Produce", "error": 6, "count": -1}, "count must be at least 1"),
    ({"api": "Produce", "error": 6, "count": "3"}, "count must be an integer"),
    ({"api": "Produce", "delay_ms": -5}, "delay_ms must be between 0"),
    ({"api": "Produce"}, "needs an error, a delay_ms or close"),
    ({"api": "Produce", "close": "yes"}, "close must be true or false"),
    ({"api": "Produce", "error": 6, "partition": 0}, "a partition needs its topic"),
    ({"api": "Produce", "error": 6, "colour": "red"}, "unknown field(s) colour"),
    (["Produce"], "a fault is a JSON object"),
])
def test_bad_fault_descriptions_are_refused_with_what_is_valid(spec, message):
    with pytest.raises(FaultSpecError, match=None) as raised:
        FaultInjector().add(spec, REGISTRY)
    assert message in str(raised.value)
