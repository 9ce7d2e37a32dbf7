"""Who this broker is: its node id, its data dir's meta.properties and the cluster id."""

from __future__ import annotations

from pathlib import Path

from kafkacompat.config import StartupError
from kafkacompat.controller.topics import new_cluster_id

META_PROPERTIES = "meta.properties"


class BrokerIdentity:
    """The node id and the cluster id of meta.properties. A single node makes a cluster id up on
    first start; a clustered broker leaves it empty until it has joined (adopt_cluster_id), as
    Kafka takes it from ZooKeeper."""

    def __init__(self, node_id: int, data_dir: Path, *, clustered: bool) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.clustered = clustered
        self.cluster_id = ""

    def load(self) -> None:
        path = self.data_dir / META_PROPERTIES
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            stored = props.get("node.id", props.get("broker.id"))
            if stored is not None and int(stored) != self.node_id:
                raise StartupError(
                    f"the data dir {self.data_dir} belongs to broker {stored}, not {self.node_id}: "
                    f"start with --broker-id {stored} or use another --data-dir"
                )
            if props.get("cluster.id"):
                self.cluster_id = props["cluster.id"]
                return
        if not self.clustered:
            self.cluster_id = new_cluster_id()
            self._write(self.cluster_id)

    def _write(self, cluster_id: str) -> None:
        (self.data_dir / META_PROPERTIES).write_text(
            f"#kafkacompat\nversion=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")

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
            self._write(cluster_id)
        self.cluster_id = cluster_id
