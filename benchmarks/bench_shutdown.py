"""How long a broker process takes to stop after SIGTERM: from the signal to its "stopped" log
line, and from that line to the process's exit.

    python benchmarks/bench_shutdown.py [--repeat R]

Cases (each R times, medians and maxima printed; nothing is asserted):

  single             a single node with a topic, after some produce
  clustered          one broker on a real ZooKeeper (controlled shutdown with ZooKeeper up)
  zookeeper-down     the same with ZooKeeper killed first: controlled shutdown fails its
                     controlled.shutdown.max.retries attempts (backoff set to 200 ms here)

The "stopped -> exit" figure is what the process does after the broker has closed everything:
trio's teardown, atexit hooks (kazoo's), interpreter finalization.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafkacompat.testing.process import free_port
from kafkacompat.testing.zookeeper import ZooKeeperServer


def run_once(extra: list[str], *, zookeeper: ZooKeeperServer | None, kill_zookeeper: bool) -> tuple[float, float]:
    data_dir = tempfile.mkdtemp(prefix="bench-shutdown-")
    port = free_port()
    args = [sys.executable, "-m", "kafkacompat", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", data_dir, *extra]
    if zookeeper is not None:
        args += ["--zookeeper", zookeeper.connect, "--set", "zookeeper.session.timeout.ms=1500"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    ready, stopped = threading.Event(), threading.Event()
    stopped_at = [0.0]

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "listening on" in line:
                ready.set()
            if "stopped; logs flushed" in line:
                stopped_at[0] = time.monotonic()
                stopped.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    if not ready.wait(60):
        proc.kill()
        raise RuntimeError("the broker did not start")
    if kill_zookeeper and zookeeper is not None:
        zookeeper.stop()
        time.sleep(1)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    exited = time.monotonic()
    stopped.wait(2)
    return stopped_at[0] - signalled, exited - stopped_at[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for case in ("single", "clustered", "zookeeper-down"):
        figures = []
        for _ in range(args.repeat):
            zookeeper = None
            if case != "single":
                zookeeper = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="bench-zk-"))).start()
            try:
                extra = ["--set", "controlled.shutdown.retry.backoff.ms=200"] if case == "zookeeper-down" else []
                figures.append(run_once(extra, zookeeper=zookeeper, kill_zookeeper=case == "zookeeper-down"))
            finally:
                if zookeeper is not None:
                    zookeeper.stop()
        to_stopped = [f[0] for f in figures]
        to_exit = [f[1] for f in figures]
        rows.append((case, statistics.median(to_stopped), max(to_stopped), statistics.median(to_exit), max(to_exit)))
    print(f"{'case':<16}{'signal->stopped median':>24}{'max':>8}{'stopped->exit median':>24}{'max':>8}")
    for case, stop_median, stop_max, exit_median, exit_max in rows:
        print(f"{case:<16}{stop_median:>23.3f}s{stop_max:>7.3f}s{exit_median:>23.3f}s{exit_max:>7.3f}s")


if __name__ == "__main__":
    main()
