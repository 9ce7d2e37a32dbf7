"""A virtual LAN of Linux network namespaces, for network partitions between real processes.

Every host (ZooKeeper, each broker, the test's clients) gets a namespace of its own with one
address on a shared segment: a veth pair per host, its other end on a bridge in a "switch"
namespace. ``cut(a, b)`` partitions two hosts with nftables rules in both namespaces that drop
every packet between them, silently (a blackhole: a connect hangs, an established connection
stalls and times out, nobody gets a RST), which is what a real partition looks like;
``heal(a, b)`` removes them and the stalled connections resume.

    with Network() as net:
        zk, b0 = net.add_host("zk"), net.add_host("b0")
        subprocess.Popen([*b0.command_prefix, "some", "server"])   # runs in b0's namespace
        with net.entered(net.add_host("client")):                  # this thread's sockets too
            ...
            net.cut(b0, zk)

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2 and nftables (scripts/test.sh installs
nftables). Nothing outside the namespaces created here is touched: no address, route, rule or
sysctl of the machine's own namespace. The namespaces are named ``kc<pid>-<n>-<host>``; those
of a test process that died without cleaning up are removed by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator

SUBNET = "10.0.0"  # private to each Network: its hosts see no other segment
_CLONE_NEWNET = 0x40000000
_PREFIX = "kc"
_STALE = re.compile(rf"^{_PREFIX}(\d+)-\d+-")
_networks = itertools.count()
_TABLE = """
table inet partition {
    set peers { type ipv4_addr; }
    chain input { type filter hook input priority 0; policy accept; ip saddr @peers drop; }
    chain output { type filter hook output priority 0; policy accept; ip daddr @peers drop; }
}
"""


def netns_available() -> str | None:
    """None when namespaces can be made here, else what is missing."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: scripts/test.sh installs it (iproute2, nftables)"
    return None


def _run(*args: str, stdin: str | None = None) -> None:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def _remove_stale_namespaces() -> None:
    """Namespaces of earlier test processes that are gone (killed before their cleanup)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        name = line.split(" ", 1)[0]
        match = _STALE.match(name)
        if match and not os.path.exists(f"/proc/{match[1]}"):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str

    @property
    def command_prefix(self) -> list[str]:
        """Prepend to a command to run it in this host's namespace."""
        return ["ip", "netns", "exec", self.namespace]

    def nft(self, script: str) -> None:
        _run("ip", "netns", "exec", self.namespace, "nft", "-f", "-", stdin=script)


class Network:
    def __init__(self) -> None:
        self.tag = f"{_PREFIX}{os.getpid()}-{next(_networks)}"
        self.switch = f"{self.tag}-switch"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._cuts: set[frozenset[str]] = set()

    def __enter__(self) -> "Network":
        _remove_stale_namespaces()
        try:
            self._add_namespace(self.switch)
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        index = len(self.hosts) + 1
        host = Host(name, f"{self.tag}-{name}", f"{SUBNET}.{index}")
        self._add_namespace(host.namespace)
        port = f"port{index}"
        # Both ends are created in their namespaces directly (no name clash with the machine's).
        _run("ip", "link", "add", "eth0", "netns", host.namespace, "type", "veth", "peer", "name", port,
             "netns", self.switch)
        _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
        _run("ip", "-n", self.switch, "link", "set", port, "up")
        _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", host.namespace, "link", "set", "eth0", "up")
        host.nft(_TABLE)
        self.hosts[name] = host
        return host

    # ---- partitions ---------------------------------------------------------------------------

    def cut(self, a: Host, b: Host) -> None:
        """Drop every packet between ``a`` and ``b`` (both ways, in both namespaces)."""
        a.nft(f"add element inet partition peers {{ {b.address} }}")
        b.nft(f"add element inet partition peers {{ {a.address} }}")
        self._cuts.add(frozenset((a.name, b.name)))

    def heal(self, a: Host, b: Host) -> None:
        a.nft(f"delete element inet partition peers {{ {b.address} }}")
        b.nft(f"delete element inet partition peers {{ {a.address} }}")
        self._cuts.discard(frozenset((a.name, b.name)))

    def heal_all(self) -> None:
        for pair in list(self._cuts):
            a, b = (self.hosts[name] for name in sorted(pair))
            self.heal(a, b)

    # ---- the calling thread in a host's namespace -----------------------------------------------

    @contextlib.contextmanager
    def entered(self, host: Host) -> Iterator[Host]:
        """Move the calling thread into ``host``'s namespace (setns) and back at the end: sockets
        it opens meanwhile, and the threads it starts (librdkafka's), live on this network."""
        original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{host.namespace}", os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield host
            finally:
                _setns(original)
        finally:
            os.close(original)

    def close(self) -> None:
        """Delete the namespaces (their interfaces go with them). Processes still running in one
        keep it alive until they exit: stop them first."""
        for name in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        self._namespaces.clear()
