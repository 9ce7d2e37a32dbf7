"""Who this broker is: its node id, its log dirs' meta.properties and the cluster id.

Every log directory has a meta.properties (as Kafka's): the cluster id, the node id, and the
directory's own ``directory.id`` (a Uuid, as Kafka 3.7+ writes it). A directory that belongs to
another broker or another cluster refuses the start."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Sequence

from kafkacompat.config import StartupError
from kafkacompat.controller.topics import encode_topic_id, new_cluster_id

META_PROPERTIES = "meta.properties"


class BrokerIdentity:
    """The node id and the cluster id of meta.properties. A single node makes a cluster id up on
    first start; a clustered broker leaves it empty until it has joined (adopt_cluster_id), as
    Kafka takes it from ZooKeeper."""

    def __init__(self, node_id: int, data_dir: Path, *, clustered: bool,
                 log_dirs: Sequence[Path] | None = None) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.log_dirs = [Path(d) for d in log_dirs] if log_dirs else [data_dir]
        self.clustered = clustered
        self.cluster_id = ""
        self.directory_ids: dict[Path, str] = {}  # each readable log dir's directory.id

    def load(self) -> None:
        found: dict[Path, dict[str, str]] = {}
        for log_dir in self.log_dirs:
            try:
                found[log_dir] = _read_properties(log_dir / META_PROPERTIES)
            except OSError:
                continue  # an unreadable log dir: the LogManager takes it offline
        cluster_dir = None
        for log_dir, props in found.items():
            stored = props.get("node.id", props.get("broker.id"))
            if stored is not None and int(stored) != self.node_id:
                raise StartupError(
                    f"the log dir {log_dir} belongs to broker {stored}, not {self.node_id}: "
                    f"start with --broker-id {stored} or use another --data-dir"
                )
            stored_cluster = props.get("cluster.id", "")
            if stored_cluster and self.cluster_id and stored_cluster != self.cluster_id:
                raise StartupError(
                    f"the log dirs {cluster_dir} and {log_dir} belong to different clusters ({self.cluster_id} "
                    f"and {stored_cluster} in their {META_PROPERTIES}): use log directories of one cluster"
                )
            if stored_cluster and not self.cluster_id:
                self.cluster_id, cluster_dir = stored_cluster, log_dir
            if props.get("directory.id"):
                self.directory_ids[log_dir] = props["directory.id"]
        if not self.cluster_id and not self.clustered:
            self.cluster_id = new_cluster_id()
        self._write_missing(found)

    def _write_missing(self, found: dict[Path, dict[str, str]]) -> None:
        """Complete each readable dir's meta.properties (cluster id once known, directory id)."""
        for log_dir, props in found.items():
            if props.get("cluster.id", "") != self.cluster_id or log_dir not in self.directory_ids:
                self._write(log_dir)

    def _write(self, log_dir: Path) -> None:
        directory_id = self.directory_ids.setdefault(log_dir, encode_topic_id(uuid.uuid4()))
        cluster = f"cluster.id={self.cluster_id}\n" if self.cluster_id else ""
        path = log_dir / META_PROPERTIES
        partial = path.with_name(META_PROPERTIES + ".tmp")
        partial.write_text(f"#kafkacompat\nversion=1\n{cluster}node.id={self.node_id}\n"
                           f"directory.id={directory_id}\n")
        partial.replace(path)

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """The metadata store's cluster id, on joining. A data dir that already belongs to another
        cluster is refused (Kafka's InconsistentClusterIdException): joining would serve, and then
        delete as strays, logs of a different cluster."""
        if self.cluster_id and self.cluster_id != cluster_id:
            raise StartupError(
                f"the cluster id {cluster_id} in the metadata store does not match {self.cluster_id} in "
                f"{self.data_dir / META_PROPERTIES}: this broker is trying to join the wrong cluster; "
                f"check zookeeper.connect (and its chroot) or use another --data-dir"
            )
        if not self.cluster_id:
            self.cluster_id = cluster_id
            for log_dir in self.log_dirs:
                try:
                    self._write(log_dir)
                except OSError:
                    continue  # an offline log dir gets it when it is back
        self.cluster_id = cluster_id


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    if not path.exists():
        return props
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props
