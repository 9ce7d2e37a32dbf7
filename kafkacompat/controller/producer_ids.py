"""Producer ids, unique across the cluster and across restarts, handed out in blocks.

As Kafka's ZooKeeper-era ProducerIdManager: the latest allocated block is one small document in
the metadata store (Kafka's znode ``/latest_producer_id_block``, JSON
``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``). A broker that
needs ids reads it, writes the next block with compare-and-set (retrying when another broker won
the race) and then hands ids out of that block from memory. A block is claimed durably before
any id in it is used, so ids never repeat across restarts; ids of a block a broker did not use up
before stopping are skipped, as in Kafka.

The store is anything with ``async get() -> (bytes | None, version)`` and
``async compare_and_set(data, expected_version) -> bool``. ``FileBlockStore`` is the embedded
(single-node) implementation: a file in the data dir replaced atomically.
``MetadataStoreBlocks`` adapts the cluster's MetadataStore (controller/store.py: embedded tree
or ZooKeeper) to the same two calls on ``/latest_producer_id_block``, Kafka's znode.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

import trio

logger = logging.getLogger("kafkacompat.controller")

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
BLOCK_VERSION = 1
BLOCK_FILE = "latest-producer-id-block.json"
MAX_PRODUCER_ID = 2**63 - 1


BLOCK_ZNODE = "/latest_producer_id_block"


class BlockStore(Protocol):
    async def get(self) -> tuple[bytes | None, int]: ...

    async def compare_and_set(self, data: bytes, expected_version: int) -> bool: ...


class ProducerIdsExhaustedError(RuntimeError):
    pass


class FileBlockStore:
    """The latest block as a JSON file in the data dir, replaced with write-fsync-rename.

    The version is the number of writes this process saw; one broker process owns the file, so
    compare-and-set only has to guard against its own stale reads.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / BLOCK_FILE
        self._version = 0

    async def get(self) -> tuple[bytes | None, int]:
        try:
            return self.path.read_bytes(), self._version
        except FileNotFoundError:
            return None, self._version

    async def compare_and_set(self, data: bytes, expected_version: int) -> bool:
        if expected_version != self._version:
            return False
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._version += 1
        return True


class MetadataStoreBlocks:
    """The block document as a node of a MetadataStore (``get_or_none``, ``create``, ``set`` with
    a version; NodeExistsError / BadVersionError when another broker wrote first)."""

    def __init__(self, store: Any, path: str = BLOCK_ZNODE) -> None:
        self.store = store
        self.path = path

    async def get(self) -> tuple[bytes | None, int]:
        found = await self.store.get_or_none(self.path)
        return (None, -1) if found is None else found

    async def compare_and_set(self, data: bytes, expected_version: int) -> bool:
        from kafkacompat.controller.store import BadVersionError, NodeExistsError, NoNodeError

        try:
            if expected_version < 0:
                await self.store.create(self.path, data)
            else:
                await self.store.set(self.path, data, expected_version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            return False
        return True


def encode_block(broker_id: int, first: int, last: int) -> bytes:
    return json.dumps({"version": BLOCK_VERSION, "broker": broker_id, "block_start": str(first),
                       "block_end": str(last)}).encode()


def decode_block(data: bytes) -> tuple[int, int, int]:
    """(broker, first, last) of a stored block."""
    document = json.loads(data)
    if document.get("version") != BLOCK_VERSION:
        raise ValueError(f"unknown producer id block version {document.get('version')!r}")
    return int(document["broker"]), int(document["block_start"]), int(document["block_end"])


class ProducerIdManager:
    """Hands out producer ids of this broker's current block; claims the next block when it is
    used up."""

    def __init__(self, broker_id: int, store: BlockStore, *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.broker_id = broker_id
        self.store = store
        self.block_size = block_size
        self._next = 0
        self._last = -1  # current block exhausted (or none yet)
        self._claiming: trio.Lock | None = None

    async def generate(self) -> int:
        """A producer id no broker of this cluster has handed out before (OSError when the store
        cannot be written)."""
        if self._next > self._last:
            if self._claiming is None:
                self._claiming = trio.Lock()
            async with self._claiming:  # concurrent requests wait for one claim
                if self._next > self._last:
                    self._next, self._last = await self._claim_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    async def _claim_block(self) -> tuple[int, int]:
        while True:
            data, version = await self.store.get()
            if data is None:
                first = 0
            else:
                try:
                    _, _, previous_last = decode_block(data)
                except (ValueError, KeyError, TypeError) as error:
                    raise OSError(f"the stored producer id block is unreadable ({error}); refusing to reuse ids") from error
                first = previous_last + 1
            last = first + self.block_size - 1
            if last > MAX_PRODUCER_ID:
                raise ProducerIdsExhaustedError("all producer ids have been allocated")
            if await self.store.compare_and_set(encode_block(self.broker_id, first, last), version):
                logger.info("Broker %d claimed producer ids %d to %d", self.broker_id, first, last)
                return first, last
