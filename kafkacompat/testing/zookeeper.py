"""A standalone ZooKeeper server on a free loopback port with a temporary data dir (tests, local
clusters). Uses the Debian `zookeeper` package's jars (/usr/share/java), or $ZOOKEEPER_CLASSPATH.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from kafkacompat.testing.process import free_port

DEBIAN_CLASSPATH = "/usr/share/zookeeper/*:/usr/share/java/*"


def zookeeper_available() -> bool:
    return shutil.which("java") is not None and (
        bool(os.environ.get("ZOOKEEPER_CLASSPATH")) or Path("/usr/share/java/zookeeper.jar").exists()
    )


class ZooKeeperServer:
    """``start()`` writes a zoo.cfg (tickTime 200 ms so sessions can be as short as 400 ms) and
    runs ZooKeeperServerMain; ``stop()`` kills it. ``host`` is the address it listens on;
    ``command_prefix`` runs java through another command (e.g. ``ip netns exec``)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, tick_ms: int = 200, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\ndataDir={self.data_dir / 'data'}\nclientPort={self.port}\n"
            f"clientPortAddress={self.host}\nmaxClientCnxns=0\nadmin.enableServer=false\n"
            f"minSessionTimeout={2 * self.tick_ms}\nmaxSessionTimeout=60000\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            # A test server's transaction log is not fsynced and not preallocated (64 MB by default):
            # on a busy machine the fsyncs stalled the first session past its connect timeout and
            # later sessions past their timeouts. A killed server loses nothing still in the page cache.
            "forceSync=no\npreAllocSize=1024\n"
        )
        classpath = os.environ.get("ZOOKEEPER_CLASSPATH", DEBIAN_CLASSPATH)
        log = open(self.data_dir / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            [*self.command_prefix, "java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", classpath,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.data_dir}/zookeeper.log")
            if self._ruok():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start within {timeout}s; see {self.data_dir}/zookeeper.log")

    def _ruok(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
