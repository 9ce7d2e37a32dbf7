"""Follower fetchers: one Trio task per source broker, with its own TCP connection, fetching
every partition this broker follows on that leader with Kafka's Fetch protocol as a replica
(ReplicaId before v15, the ReplicaState tagged field from v15; the version is the highest both
sides support, from ApiVersions).

Batches are appended byte for byte (``Partition.append_as_follower``: offsets and leader epochs
as the leader wrote them, producer state updated by the log), the high watermark and log start
offset come from the responses (a log start that moved up is checkpointed at once), and every
request carries our log start, so the leader knows the low watermark DeleteRecords waits for.
Truncation after a leader change uses Fetch v12+'s diverging epoch (Kafka's
AbstractFetcherThread.truncateOnFetchResponse): the leader says where our last fetched epoch
ends in its log, we truncate to the smaller of that and where the same epoch ends in ours, and
fetch again; this repeats until the logs agree. OFFSET_OUT_OF_RANGE truncates to the
leader's high watermark (our log is ahead) or restarts at the leader's log start (behind).
Errors back off per partition (replica.fetch.backoff.ms); a lost connection reconnects to
wherever the leader is.

Requests go in a fetch session (KIP-227, replication/fetch_session.py, Kafka's
FetchSessionHandler): after the first full fetch, only partitions whose fetch data changed are
named, those left out (throttled, backing off, gone) are forgotten, and a partition missing
from the answer had nothing new.
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from kafkacompat.replication.fetch_session import FetchSessionHandler, PartitionData
from kafkacompat.replication.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from kafkacompat.security.client import InterBrokerAuthenticationError, authenticate, open_broker_stream
from kafkacompat.wire import codec
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.fetch import FETCH_MAX_VERSION, decode_fetch_response
from kafkacompat.wire.produce import INT16, INT32, make_writer
from kafkacompat.wire.records import HEADER_SIZE, crc_ok, read_header

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig
    from kafkacompat.controller.state import BrokerInfo
    from kafkacompat.controller.topics import TopicInfo
    from kafkacompat.quotas import ReplicationQuota
    from kafkacompat.replication.partition import Partition

log = logging.getLogger("kafkacompat.replication.fetcher")

FETCH_KEY = 1
API_VERSIONS_KEY = 18
MIN_REPLICA_FETCH_VERSION = 12  # diverging epochs; every kafkacompat broker serves 4-18
_FRAME_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
_FETCH_TOP = struct.Struct(">iiib")  # max_wait_ms, min_bytes, max_bytes, isolation_level
_SESSION = struct.Struct(">ii")
_PARTITION_V12 = struct.Struct(">iiqiqi")  # partition, current_leader_epoch, fetch_offset,
#                                            last_fetched_epoch, log_start_offset, partition_max_bytes
_PARTITION_V9 = struct.Struct(">iiqqi")
_REPLICA_STATE = struct.Struct(">iqB")  # replica_id, replica_epoch, empty tagged fields
_NO_RETRY_LOG = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH)


# In ZooKeeper mode Kafka's followers send no broker epoch (ReplicaState.ReplicaEpoch -1): the
# epoch fences stale replicas only in KRaft, where the controller hands it out at registration.
REPLICA_EPOCH = -1
_NETWORK_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError)


class FetcherConnectionError(Exception):
    pass


class FetcherHost(Protocol):
    """What a fetcher needs of the replica manager that owns it."""

    node_id: int
    config: "BrokerConfig"
    partitions: "dict[tuple[str, int], Partition]"
    follower_quota: "ReplicationQuota"

    def brokers(self) -> "dict[int, BrokerInfo]": ...

    def topic(self, name: str) -> "TopicInfo | None": ...

    def checkpoint_log_start_offsets(self) -> None: ...


class _Connection:
    """A minimal Kafka client connection: one request in flight at a time."""

    def __init__(self, stream: trio.abc.Stream, client_id: str) -> None:
        self.stream = stream
        self.client_id = client_id.encode()
        self.correlation_id = 0
        self._buffer = bytearray()

    async def request(self, api_key: int, version: int, body: bytes, *, flexible_header: bool,
                      flexible_response: bool) -> memoryview:
        self.correlation_id += 1
        header = _REQUEST_HEADER.pack(api_key, version, self.correlation_id) + INT16.pack(len(self.client_id))
        header += self.client_id + (b"\x00" if flexible_header else b"")
        await self.stream.send_all(_FRAME_SIZE.pack(len(header) + len(body)) + header + body)
        frame = await self._receive_frame()
        (correlation_id,) = INT32.unpack_from(frame, 0)
        if correlation_id != self.correlation_id:
            raise FetcherConnectionError(f"correlation id {correlation_id}, expected {self.correlation_id}")
        position = 4
        if flexible_response:
            position += 1  # the response header's (empty) tagged fields
            if frame[4] != 0:
                from kafkacompat.wire.frame import skip_tagged_fields
                position = skip_tagged_fields(frame, 4)
        return memoryview(frame)[position:]

    async def _receive_exactly(self, count: int) -> bytearray:
        while len(self._buffer) < count:
            data = await self.stream.receive_some(max(65536, count - len(self._buffer)))
            if not data:
                raise FetcherConnectionError("the leader closed the connection")
            self._buffer += data
        out = self._buffer[:count]
        del self._buffer[:count]
        return out

    async def _receive_frame(self) -> bytearray:
        (size,) = _FRAME_SIZE.unpack(await self._receive_exactly(4))
        if size < 4:
            raise FetcherConnectionError(f"bad frame size {size}")
        return await self._receive_exactly(size)


async def _api_versions(conn: _Connection) -> dict[int, tuple[int, int]]:
    body = await conn.request(API_VERSIONS_KEY, 0, b"", flexible_header=False, flexible_response=False)
    try:
        response = codec.decode_response(API_VERSIONS_KEY, 0, body)
    except codec.DecodeError as exc:
        raise FetcherConnectionError(f"unreadable ApiVersions response: {exc}") from None
    if response.error_code:
        raise FetcherConnectionError(f"ApiVersions failed with error {response.error_code}")
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}


@dataclass(slots=True)
class _Fetching:
    """A partition of one fetch request, as it was when the request was built."""
    partition: "Partition"
    fetch_offset: int
    leader_epoch: int


def encode_fetch_request(version: int, *, replica_id: int, replica_epoch: int, max_wait_ms: int, min_bytes: int,
                         max_bytes: int, topics: list[tuple[str, object, list[tuple]]], session_id: int = 0,
                         session_epoch: int = -1, forgotten: list[tuple[str, object, list[int]]] = ()) -> bytes:
    """A FetchRequest body. ``topics``: (name, topic_id, [(partition, current_leader_epoch,
    fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes)]); ``forgotten``:
    (name, topic_id, [partition]). Session id 0 with epoch -1 is a sessionless full fetch."""
    out = make_writer(version >= 12)
    if version <= 14:
        out += INT32.pack(replica_id)
    out += _FETCH_TOP.pack(max_wait_ms, min_bytes, max_bytes, 0)
    out += _SESSION.pack(session_id, session_epoch)
    out.array_length(len(topics))
    for name, topic_id, partitions in topics:
        _topic_key(out, version, name, topic_id)
        out.array_length(len(partitions))
        for index, current_epoch, offset, last_epoch, log_start, max_part in partitions:
            if version >= 12:
                out += _PARTITION_V12.pack(index, current_epoch, offset, last_epoch, log_start, max_part)
                out.empty_tagged_fields()
            else:
                out += _PARTITION_V9.pack(index, current_epoch, offset, log_start, max_part)
        out.empty_tagged_fields()
    out.array_length(len(forgotten))
    for name, topic_id, indexes in forgotten:
        _topic_key(out, version, name, topic_id)
        out.array_length(len(indexes))
        for index in indexes:
            out += INT32.pack(index)
        if version >= 12:
            out.empty_tagged_fields()
    out.string("")  # rack id
    if version >= 15:
        out.tagged_fields([(1, _REPLICA_STATE.pack(replica_id, replica_epoch, 0))])
    elif version >= 12:
        out.empty_tagged_fields()
    return bytes(out)


def _topic_key(out, version: int, name: str, topic_id) -> None:
    if version >= 13:
        out.uuid(topic_id)
    else:
        out.string(name)


class ReplicaFetcher:
    """Fetches the partitions this broker follows on one leader."""

    def __init__(self, host: FetcherHost, leader_id: int,
                 request_counts: "Counter[tuple[int, str]] | None" = None) -> None:
        self.replicas = host
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], float] = {}  # key -> do not fetch before (trio time)
        self.caught_up: set[tuple[str, int]] = set()  # reached the leader's high watermark at the last fetch
        self.cancel_scope = trio.CancelScope()
        self._changed = trio.Event()
        self.connected_version: int | None = None
        self.session = FetchSessionHandler()  # survives reconnects: the next fetch closes the old session
        self.request_counts: Counter[tuple[int, str]] = request_counts if request_counts is not None else Counter()

    def __repr__(self) -> str:
        return f"ReplicaFetcher(broker {self.replicas.node_id} <- {self.leader_id})"

    def add(self, key: tuple[str, int]) -> None:
        self.partitions[key] = 0.0
        self.caught_up.discard(key)
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self.caught_up.discard(key)
        self._changed.set()

    def stop(self) -> None:
        self.cancel_scope.cancel()

    @property
    def _config(self):
        return self.replicas.config

    async def run(self) -> None:
        backoff = self._config.replica_fetch_backoff_ms / 1000
        with self.cancel_scope:
            while True:
                if not self.partitions:
                    await self._wait_for_change(None)
                    continue
                try:
                    await self._session()
                except InterBrokerAuthenticationError as exc:
                    log.warning("%s: cannot authenticate to broker %d on the inter-broker listener %s: %s; "
                                "check its sasl.jaas.config username/password; retrying in %.1fs", self,
                                self.leader_id, self._config.inter_broker_listener.name, exc, backoff)
                except (*_NETWORK_ERRORS, FetcherConnectionError) as exc:
                    log.info("%s: %s: %s; retrying in %.1fs", self, type(exc).__name__, exc, backoff)
                except Exception:
                    # A bug or a response we cannot read: replication of these partitions stalls,
                    # the broker keeps serving; say so loudly and try again.
                    log.exception("%s: fetching %s failed unexpectedly; reconnecting in %.1fs",
                                  self, sorted(self.partitions), backoff)
                else:
                    continue
                self.connected_version = None
                await trio.sleep(backoff)

    async def _wait_for_change(self, deadline: float | None) -> None:
        self._changed = trio.Event()
        if deadline is None:
            await self._changed.wait()
        else:
            with trio.move_on_at(deadline):
                await self._changed.wait()

    async def _session(self) -> None:
        info = self.replicas.brokers().get(self.leader_id)
        if info is None:
            raise FetcherConnectionError(f"broker {self.leader_id} is not registered")
        timeout = self._config.replica_socket_timeout_ms / 1000
        host, port = info.address(self._config.inter_broker_listener.name)
        with trio.fail_after(timeout):
            stream = await open_broker_stream(self._config, host, port)
        async with stream:
            conn = _Connection(stream, f"kafkacompat-replica-{self.replicas.node_id}")
            with trio.fail_after(timeout):
                versions = await _api_versions(conn)
                await authenticate(self._config, conn.request, host)
            low, high = versions.get(FETCH_KEY, (0, -1))
            version = min(high, FETCH_MAX_VERSION)
            if version < max(low, MIN_REPLICA_FETCH_VERSION):
                raise FetcherConnectionError(f"broker {self.leader_id} serves Fetch v{low}-{high}; need v12+")
            self.connected_version = version
            log.info("%s: connected to %s:%d, Fetch v%d", self, host, port, version)
            while True:
                await self._fetch_once(conn, version, timeout)

    def _fetchable(self) -> tuple[list[_Fetching], float | None]:
        now = trio.current_time()
        ready: list[_Fetching] = []
        next_time = None
        for key, not_before in list(self.partitions.items()):
            partition = self.replicas.partitions.get(key)
            if partition is None or partition.is_leader or partition.leader_id != self.leader_id:
                continue
            if not_before <= now and self._follower_throttled(key, partition, now):
                # Kafka's fetcher leaves it out and looks again after replica.fetch.backoff.ms
                not_before = now + self._config.replica_fetch_backoff_ms / 1000
            if not_before > now:
                next_time = not_before if next_time is None else min(next_time, not_before)
                continue
            ready.append(_Fetching(partition, partition.log_end_offset, partition.leader_epoch))
        return ready, next_time

    def _follower_throttled(self, key: tuple[str, int], partition: "Partition", now: float) -> bool:
        """Kafka's shouldFollowerThrottle: a throttled replica not caught up, while the follower
        throttle's rate is over its bound."""
        quota = self.replicas.follower_quota
        return (key not in self.caught_up and quota.is_throttled(self.replicas.topic(key[0]), key[1])
                and quota.exceeded(now))

    async def _fetch_once(self, conn: _Connection, version: int, timeout: float) -> None:
        ready, next_time = self._fetchable()
        if not ready:
            await self._wait_for_change(next_time)
            return
        wanted, use_ids = self._wanted(ready, version)
        if not use_ids:
            version = min(version, 12)
        plan = self.session.build(wanted, uses_topic_ids=use_ids)
        self.request_counts[(self.leader_id, "full" if plan.full else "incremental")] += 1
        body = encode_fetch_request(
            version, replica_id=self.replicas.node_id, replica_epoch=REPLICA_EPOCH,
            max_wait_ms=self._config.replica_fetch_wait_max_ms, min_bytes=self._config.replica_fetch_min_bytes,
            max_bytes=self._config.replica_fetch_response_max_bytes, topics=_by_topic(plan.to_send),
            session_id=plan.session_id, session_epoch=plan.epoch, forgotten=_forgotten_by_topic(plan.forgotten),
        )
        wait = self._config.replica_fetch_wait_max_ms / 1000
        try:
            with trio.fail_after(timeout + wait):
                response_body = await conn.request(FETCH_KEY, version, body, flexible_header=version >= 12,
                                                   flexible_response=version >= 12)
            response = decode_fetch_response(response_body, version)
        except BaseException:
            self.session.handle_error()
            raise
        self._handle_response(response, ready, version)

    def _wanted(self, ready: list[_Fetching], version: int) -> tuple[dict, bool]:
        """What to fetch now, per partition (the session handler's input), and whether every
        topic has an id to fetch it by (v13+)."""
        use_ids = version >= 13
        wanted: dict[tuple[str, int], PartitionData] = {}
        max_partition_bytes = self._config.replica_fetch_max_bytes
        topic_ids: dict[str, object] = {}
        for f in ready:
            name = f.partition.topic
            if name not in topic_ids:
                topic = self.replicas.topic(name)
                topic_ids[name] = topic.topic_id if topic is not None else None
                if topic_ids[name] is None:
                    use_ids = False
            wanted[(name, f.partition.index)] = PartitionData(
                topic_ids[name], f.fetch_offset, f.partition.log_start_offset, max_partition_bytes,
                f.leader_epoch, f.partition.epochs.latest_epoch)
        return wanted, use_ids

    def _handle_response(self, response, ready: list[_Fetching], version: int) -> None:
        wanted = {(f.partition.topic, f.partition.index): f for f in ready}
        names = {data.topic_id: key[0] for key, data in self.session.session.items()}
        results = []
        for topic in response.topics:
            name = names.get(topic.topic_id, "") if version >= 13 else topic.name
            results.extend(((name, result.index), result) for result in topic.partitions)
        usable = self.session.handle_response(response.error_code, response.session_id,
                                              {key for key, _ in results}, response.throttle_time_ms)
        if response.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
            # Kafka's ReplicaFetcherThread: an error for the whole request backs off its partitions
            log.info("%s: the leader's fetch session disagrees on topic ids; starting a new one", self)
            for key in wanted:
                self._backoff(key)
            return
        if response.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info("%s: fetch session %s: %s; fetching everything in a new one", self, response.session_id,
                     _error_name(response.error_code))
            return
        if response.error_code:
            raise FetcherConnectionError(f"fetch failed with {_error_name(response.error_code)}")
        if not usable:
            log.info("%s: the leader's answer names partitions outside the fetch session; fetching everything "
                     "in a new one", self)
            return
        for key, result in results:
            fetching = wanted.get(key)
            if fetching is not None:
                self._process(fetching, result)

    def _backoff(self, key: tuple[str, int]) -> None:
        if key in self.partitions:
            self.partitions[key] = trio.current_time() + self._config.replica_fetch_backoff_ms / 1000

    def _process(self, fetching: _Fetching, result) -> None:
        partition = fetching.partition
        key = (partition.topic, partition.index)
        if (key not in self.partitions or partition.is_leader or partition.leader_epoch != fetching.leader_epoch
                or partition.log_end_offset != fetching.fetch_offset
                or self.replicas.partitions.get(key) is not partition):
            # The state moved on while the request was in flight. The leader's session now
            # thinks we know what this answer said: the next request is a full one.
            self.session.close_and_start_over()
            return
        code = result.error_code
        try:
            if code == 0:
                if result.diverging_epoch is not None:
                    truncate_on_divergence(partition, *result.diverging_epoch)
                    return
                if result.records:
                    view, headers = replica_batches(result.records[0])
                    if headers:
                        partition.append_as_follower(view, headers)
                        self._record_throttled(key, len(view))
                partition.update_follower_high_watermark(result.high_watermark)
                if partition.log_end_offset >= result.high_watermark:
                    self.caught_up.add(key)
                else:
                    self.caught_up.discard(key)
                if result.log_start_offset > partition.log_start_offset:
                    self._follow_log_start(partition, result.log_start_offset)
            elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._handle_out_of_range(partition, fetching.fetch_offset, result)
            else:
                level = logging.DEBUG if code in _NO_RETRY_LOG else logging.INFO
                log.log(level, "%s: fetching %s at %d: %s", self, partition, fetching.fetch_offset,
                        _error_name(code))
                self._backoff(key)
        except KafkaError as exc:
            log.warning("%s: %s at %d: %s", self, partition, fetching.fetch_offset, exc)
            self._backoff(key)

    def _record_throttled(self, key: tuple[str, int], size: int) -> None:
        quota = self.replicas.follower_quota
        if quota.is_throttled(self.replicas.topic(key[0]), key[1]):
            quota.record(size, trio.current_time())

    def _follow_log_start(self, partition: "Partition", leader_log_start: int) -> None:
        """The leader's log start moved up (DeleteRecords or its retention): ours follows, and
        is checkpointed at once so a crash cannot bring the deleted records back here."""
        if leader_log_start > partition.log_end_offset:
            partition.truncate_fully_and_start_at(leader_log_start)
        elif partition.advance_log_start_offset(leader_log_start):
            try:
                self.replicas.checkpoint_log_start_offsets()
            except OSError as exc:
                log.warning("%s: could not checkpoint the log start offset of %s: %s", self, partition, exc)

    def _handle_out_of_range(self, partition: "Partition", fetch_offset: int, result) -> None:
        if 0 <= result.log_start_offset and fetch_offset < result.log_start_offset:
            log.info("%s: %s at %d is below the leader's log start %d: starting there", self, partition,
                     fetch_offset, result.log_start_offset)
            partition.truncate_fully_and_start_at(result.log_start_offset)
        elif 0 <= result.high_watermark < fetch_offset:
            log.info("%s: %s at %d is past the leader's log end: truncating to its high watermark %d", self,
                     partition, fetch_offset, result.high_watermark)
            partition.truncate_to(max(result.high_watermark, partition.log_start_offset))
        else:
            self._backoff((partition.topic, partition.index))


def _by_topic(partitions: dict[tuple[str, int], PartitionData]) -> list[tuple[str, object, list[tuple]]]:
    topics: dict[str, tuple[str, object, list[tuple]]] = {}
    for (name, index), data in partitions.items():
        entry = topics.setdefault(name, (name, data.topic_id, []))
        entry[2].append((index, data.current_leader_epoch, data.fetch_offset, data.last_fetched_epoch,
                         data.log_start_offset, data.max_bytes))
    return list(topics.values())


def _forgotten_by_topic(forgotten: list[tuple[str, object, int]]) -> list[tuple[str, object, list[int]]]:
    topics: dict[tuple[str, object], list[int]] = {}
    for name, topic_id, index in forgotten:
        topics.setdefault((name, topic_id), []).append(index)
    return [(name, topic_id, indexes) for (name, topic_id), indexes in topics.items()]


def truncate_on_divergence(partition: "Partition", leader_epoch: int, leader_end_offset: int) -> int:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState for a diverging epoch from the
    leader: returns the offset truncated to."""
    end = partition.log_end_offset
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        target = min(partition.high_watermark, end)
    elif leader_epoch == UNDEFINED_EPOCH:
        target = min(leader_end_offset, end)
    else:
        follower_epoch, follower_end = partition.end_offset_for_epoch(leader_epoch)
        if follower_epoch == UNDEFINED_EPOCH:
            target = min(leader_end_offset, end)
        elif follower_epoch != leader_epoch:
            target = min(follower_end, end)  # and the next fetch tells us more
        else:
            target = min(leader_end_offset, follower_end, end)
    target = max(target, partition.log_start_offset)
    log.info("%s: log diverged from the leader at epoch %d (leader's end %d); truncating from %d to %d",
             partition, leader_epoch, leader_end_offset, end, target)
    partition.truncate_to(target)
    return target


def replica_batches(records: memoryview) -> tuple[memoryview, list]:
    """The whole batches of a fetched records blob (a trailing partial batch is dropped, as
    Kafka's followers do), each CRC-checked."""
    headers = []
    pos = 0
    total = len(records)
    while total - pos >= HEADER_SIZE:
        header = read_header(records, pos)
        if pos + header.size > total:
            break
        if not crc_ok(records, header):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"fetched batch at offset {header.base_offset} fails its CRC")
        headers.append(header)
        pos += header.size
    return records[:pos], headers


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ReplicaFetcherManager:
    """One ReplicaFetcher per source broker, started in the broker's nursery."""

    def __init__(self, host: FetcherHost) -> None:
        self.replicas = host
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.nursery: trio.Nursery | None = None
        self._leader_of: dict[tuple[str, int], int] = {}
        # fetch requests sent, by (leader id, "full" or "incremental"): kept when fetchers go
        self.request_counts: Counter[tuple[int, str]] = Counter()

    def start(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        for fetcher in self.fetchers.values():
            nursery.start_soon(fetcher.run)

    def stop(self) -> None:
        """The nursery is gone (the broker is stopping; the cluster member may still apply a
        change before its own cancellation reaches it): a fetcher made now waits for a ``start``."""
        self.nursery = None

    def add_partition(self, key: tuple[str, int], leader_id: int) -> None:
        current = self._leader_of.get(key)
        if current == leader_id:
            self.fetchers[leader_id].add(key)  # re-arm (new epoch: fetch at once)
            return
        self.remove_partition(key)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self.replicas, leader_id, self.request_counts)
            if self.nursery is not None:
                self.nursery.start_soon(fetcher.run)
        fetcher.add(key)
        self._leader_of[key] = leader_id

    def remove_partition(self, key: tuple[str, int]) -> None:
        leader_id = self._leader_of.pop(key, None)
        if leader_id is None:
            return
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None:
            fetcher.remove(key)
            if not fetcher.partitions:
                fetcher.stop()
                del self.fetchers[leader_id]

    def leader_moved(self, leader_id: int) -> None:
        """A broker's address changed (re-registration): reconnect its fetcher."""
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            return
        keys = list(fetcher.partitions)
        fetcher.stop()
        del self.fetchers[leader_id]
        for key in keys:
            self._leader_of.pop(key, None)
            self.add_partition(key, leader_id)
