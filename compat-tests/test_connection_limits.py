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
from clients import (  # noqa: E402
    Msg, RawConnection, assert_client_works, confluent_send, fetch_request, frame, request_class, request_header,
    response_class,
)

JOIN_GROUP = 11
ALTER_CLIENT_QUOTAS = 49


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


def burst(broker, count: int, source: str = "127.0.0.1") -> tuple[int, int, float]:
    """Open ``count`` connections from ``source`` at once (the kernel's backlog takes them before
    the broker accepts any), then send an ApiVersions on each: (answered, closed unanswered, the
    seconds until the last answer)."""
    from kafka.protocol.metadata import ApiVersionsRequest

    body = bytes(ApiVersionsRequest(client_software_name="t", client_software_version="1").encode(version=3))
    request = frame(request_header(18, 3, 7, flexible=True) + body)
    started = time.monotonic()
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            socks.append(sock)
            sock.settimeout(30)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", broker.port))
        answered = refused = 0
        for sock in socks:
            try:
                sock.sendall(request)
                answered += bool(sock.recv(4))  # a refused connection is closed unanswered: EOF or reset
            except (ConnectionResetError, BrokenPipeError):
                pass
        return answered, count - answered, time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()


def until(condition, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_an_address_over_its_connection_creation_rate_has_its_connections_refused(broker_factory):
    """KIP-612: connection_creation_rate on an ip entity (AlterClientQuotas) refuses an address's
    connections beyond the rate (closed unanswered, after the throttle time); other addresses are
    not limited; a specific address's quota wins over the default ip's; removed, it no longer applies."""
    from test_admin_acls_quotas import alter_quotas

    broker = broker_factory("--set", "quota.window.num=2", "--set", "quota.window.size.seconds=1")
    key = "connection_creation_rate"
    # the default ip at 5/s, this test's own address (127.0.0.1) exempted with a high quota of its own
    assert alter_quotas(broker, [([("ip", None)], [(key, 5.0)]), ([("ip", "127.0.0.1")], [(key, 10_000.0)])]) == {
        frozenset({("ip", None)}): (0, None), frozenset({("ip", "127.0.0.1")}): (0, None)}

    def refusing_burst():
        result = burst(broker, 40, "127.0.0.2")
        return result if result[1] else None

    answered, refused, _ = until(refusing_burst, "no connection of 127.0.0.2 was ever refused")
    assert 1 <= answered <= 20 and refused >= 20, (answered, refused)
    assert burst(broker, 40, "127.0.0.1")[:2] == (40, 0)
    broker.wait_for_output("over its connection_creation_rate quota", timeout=10)

    with RawConnection(broker.bootstrap) as conn:  # opened from 127.0.0.1, before the next change
        cls = request_class(ALTER_CLIENT_QUOTAS)
        entry = cls.EntryData
        response = conn.call(cls(entries=[entry(entity=[entry.EntityData(entity_type="ip", entity_name=None)],
                                                ops=[entry.OpData(key=key, value=0.0, remove=True)])],
                                 validate_only=False), response_class(ALTER_CLIENT_QUOTAS), 1)
        assert [e.error_code for e in response.entries] == [0]
    until(lambda: burst(broker, 40, "127.0.0.2")[:2] == (40, 0), "the removed quota still refuses connections")


@pytest.mark.parametrize("setting", ["max.connection.creation.rate", "listener.name.plaintext.max.connection.creation.rate"])
def test_max_connection_creation_rate_makes_new_connections_wait(broker_factory, setting):
    """Over the broker's (or the listener's) max.connection.creation.rate the acceptor waits, as
    Kafka's: every connection of a burst is served, the burst just takes about count / rate."""
    broker = broker_factory("--set", f"{setting}=5", "--set", "quota.window.num=2",
                            "--set", "quota.window.size.seconds=1")
    time.sleep(2.2)  # the start-up's own connections out of the rate's windows
    answered, refused, elapsed = burst(broker, 30)
    assert (answered, refused) == (30, 0)
    assert elapsed >= 2.0, f"30 connections at 5/s were all served within {elapsed:.2f} s"
    broker.wait_for_output("faster than max.connection.creation.rate", timeout=10)
