"""Start and stop real kafkacompat broker processes on loopback (tests, benchmarks, tools)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_MARKER = "listening on"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def distinct_free_ports(count: int) -> list[int]:
    """``count`` different free loopback ports (free_port may hand out a port it just gave)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return False
        except OSError:
            return True


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (dev-cluster takes P..P+N-1)."""
    for _ in range(50):
        port = free_port()
        if port + count - 1 < 65536 and not any(_port_taken(port + i) for i in range(count)):
            return port
    raise AssertionError(f"no {count} consecutive free ports")


class BrokerProcess:
    """A `python -m kafkacompat serve` child process with its own data dir and log file.

    ``host`` is the address it listens on and advertises; ``command_prefix`` runs the command
    through another (``["ip", "netns", "exec", ns]``: in a network namespace of the test's)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, broker_id: int = 0,
                 extra_args: list[str] | None = None, log_path: Path | None = None, host: str = "127.0.0.1",
                 command_prefix: list[str] | None = None, more_log_dirs: list[Path] | None = None) -> None:
        """``more_log_dirs``: log directories after ``data_dir`` (log.dirs, JBOD)."""
        self.data_dir = Path(data_dir)
        self.log_dirs = [self.data_dir, *(Path(d) for d in more_log_dirs or [])]
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.port = port or free_port()
        self.broker_id = broker_id
        self.extra_args = list(extra_args or [])
        self.log_path = log_path or self.data_dir.parent / f"broker-{broker_id}-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self._log_lines: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self._ready.clear()
        cmd = [
            *self.command_prefix,
            sys.executable, "-m", "kafkacompat", "serve", "--host", self.host, "--port", str(self.port),
            "--data-dir", ",".join(map(str, self.log_dirs)), "--broker-id", str(self.broker_id), *self.extra_args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self._reader = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(2)
                raise RuntimeError(f"broker did not start (exit {self.proc.poll()}):\n{self.output()}")
        return self

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with open(self.log_path, "a") as sink:
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                self._log_lines.append(line)
                if READY_MARKER in line:
                    self._ready.set()

    def output(self) -> str:
        return "".join(self._log_lines)

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        """Wait until the broker has logged ``text``: its lines reach us through a reader thread,
        so a line logged just before a response may arrive after the client saw the response."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert time.monotonic() < deadline, f"the broker never logged {text!r}:\n{self.output()}"
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker did not stop within {timeout}s after SIGTERM:\n{self.output()}")
        finally:
            if self._reader:
                self._reader.join(5)

    def kill(self) -> None:
        """SIGKILL: an unclean stop, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._reader:
            self._reader.join(5)

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
