"""Kafka's connection limits on a real broker process, over raw sockets: connections.max.idle.ms
closes a connection that stays idle (but not one that keeps sending requests, nor one parked in a
long request); max.connections.per.ip closes the connection over the limit at once;
max.connections makes new clients wait until a connection closes; a client that stops taking its
response is idle too; running out of file descriptors
(a low RLIMIT_NOFILE) makes new clients wait too, and the broker goes on serving."""

from __future__ import annotations

import os
import resource
import socket
import time

import pytest

pytest.register_assert_rewrite("clients")
from clients import Msg, RawConnection, assert_client_works, confluent_send, fetch_request, frame, request_header  # noqa: E402

JOIN_GROUP = 11


def api_versions(conn: RawConnection) -> int:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    response = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                         ApiVersionsResponse, 3)
    return response.error_code


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(broker_factory):
    broker = broker_factory("--set", "connections.max.idle.ms=1000")
    with RawConnection(broker.bootstrap) as idle, RawConnection(broker.bootstrap) as chatty:
        assert api_versions(idle) == 0 and api_versions(chatty) == 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # a request every 200 ms keeps it open
            assert api_versions(chatty) == 0
            time.sleep(0.2)
        assert idle.closed_by_broker(timeout=10)
        assert api_versions(chatty) == 0
    broker.wait_for_output("idle for more than connections.max.idle.ms (1000 ms)")



def test_a_client_that_stops_taking_its_response_is_idle(broker_factory, topic_name):
    """connections.max.idle.ms also closes a connection whose client stopped reading in the
    middle of a response: nothing moved on it for that long (Kafka's Selector sees no activity
    on it either), so it does not keep its response, or its place, forever."""
    broker = broker_factory("--set", "connections.max.idle.ms=1000")
    confluent_send(broker.bootstrap, topic_name, [Msg(b"x" * 100_000) for _ in range(160)])  # 16 MB
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(20)
    with sock:
        sock.connect(("127.0.0.1", broker.port))
        request = fetch_request(topic_name, 0, 0, max_bytes=32 * 1024 * 1024)
        sock.sendall(frame(request_header(1, 4, 1, flexible=False) + bytes(request.encode(version=4))))
        deadline = time.monotonic() + 30
        while "idle for more than connections.max.idle.ms" not in broker.output():
            assert time.monotonic() < deadline, "the stalled connection was never closed"
            time.sleep(0.1)
        received = 0
        try:
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        assert received < 16_000_000  # closed before the response was all sent
    assert_client_works(broker.bootstrap, topic_name)

def test_a_connection_parked_in_a_long_request_is_not_idle(broker_factory, topic_name):
    from clients import request_class, response_class

    join = request_class(JOIN_GROUP)
    # The first join of a group waits group.initial.rebalance.delay.ms (here 3 s, beyond the idle limit).
    broker = broker_factory("--set", "connections.max.idle.ms=1000", "--set", "group.initial.rebalance.delay.ms=3000")
    with RawConnection(broker.bootstrap, timeout=20) as conn:
        request = join(version=3, group_id=f"g-{topic_name}", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                       member_id="", protocol_type="consumer",
                       protocols=[join.JoinGroupRequestProtocol(name="range", metadata=b"")])
        started = time.monotonic()
        response = conn.call(request, response_class(JOIN_GROUP), 3)  # v3: no MEMBER_ID_REQUIRED round trip
        assert response.error_code == 0 and response.generation_id == 1
        assert time.monotonic() - started >= 2.5


def test_max_connections_per_ip_closes_the_extra_connection(broker_factory):
    broker = broker_factory("--set", "max.connections.per.ip=2")
    first, second = RawConnection(broker.bootstrap), RawConnection(broker.bootstrap)
    try:
        assert api_versions(first) == 0 and api_versions(second) == 0
        with RawConnection(broker.bootstrap) as third:
            assert third.closed_by_broker(timeout=10)
        first.sock.close()
        deadline = time.monotonic() + 10
        while True:  # the broker counts the closed connection out when it notices the close
            with RawConnection(broker.bootstrap) as again:
                try:
                    assert api_versions(again) == 0
                    break
                except (ConnectionError, OSError):
                    assert time.monotonic() < deadline, "a freed slot was never reused"
                    time.sleep(0.1)
        assert api_versions(second) == 0
    finally:
        first.sock.close()
        second.sock.close()
    # The client sees the close before the test's reader thread has taken the broker's log line
    # from the pipe (the broker logs, then closes): wait for the line rather than race it.
    expected = "already has the configured maximum of 2 connections (max.connections.per.ip)"
    broker.wait_for_output(expected, timeout=10)


def test_max_connections_makes_a_new_client_wait_for_a_free_slot(broker_factory):
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    broker = broker_factory("--set", "max.connections=2")
    first, second = RawConnection(broker.bootstrap), RawConnection(broker.bootstrap)
    try:
        assert api_versions(first) == 0 and api_versions(second) == 0
        with RawConnection(broker.bootstrap, timeout=15) as waiting:  # TCP connects: the backlog holds it
            correlation_id = waiting.send_request(
                ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
            waiting.sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                waiting.recv_frame()  # not accepted while two connections are open
            waiting.sock.settimeout(15)
            first.sock.close()
            assert waiting.read_response(ApiVersionsResponse, 3, correlation_id).error_code == 0
        assert api_versions(second) == 0
    finally:
        first.sock.close()
        second.sock.close()


def test_running_out_of_descriptors_is_waited_out(broker_factory, topic_name):
    """With the broker's open-files limit lowered (prlimit) to a few more than it has open, more
    connections arrive than it has descriptors for: accept fails with EMFILE. The broker says so
    and what to do, keeps serving the connections it has, and once they close takes new clients
    again: a real client produces and consumes."""
    broker = broker_factory()
    assert_client_works(broker.bootstrap, topic_name)  # the topic's (and __consumer_offsets') files are open
    limit = len(os.listdir(f"/proc/{broker.pid()}/fd")) + 8
    resource.prlimit(broker.pid(), resource.RLIMIT_NOFILE, (limit, limit))
    first = RawConnection(broker.bootstrap)
    extra = []
    try:
        assert api_versions(first) == 0
        extra = [socket.create_connection(("127.0.0.1", broker.port), timeout=10) for _ in range(30)]
        deadline = time.monotonic() + 30
        while "Cannot accept new connections" not in broker.output():
            assert broker.proc.poll() is None, f"the broker ended:\n{broker.output()}"
            assert time.monotonic() < deadline, "the broker never ran out of descriptors"
            time.sleep(0.05)
        assert "raise the open-files limit" in broker.output()
        assert api_versions(first) == 0  # still served
    finally:
        first.sock.close()
        for sock in extra:
            sock.close()
    assert broker.proc.poll() is None
    assert_client_works(broker.bootstrap, topic_name)
    assert broker.output().count("Cannot accept new connections") == 1  # once for the burst
    assert broker.output().count("Accepting connections again") == 1
