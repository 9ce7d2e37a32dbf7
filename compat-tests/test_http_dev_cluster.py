"""`kafkacompat dev-cluster --http-port N` as a subprocess: broker i serves its console and API on
N+i, the start prints a progress line per broker and the consoles, and a broker stopped through
any broker's API (a crash) and started again serves clients as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import confluent_kafka

from kafkacompat.testing.http import http_request
from kafkacompat.testing.process import free_ports


def _wait_for_line(log_path, text: str, proc: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        output = log_path.read_text(errors="replace")
        if text in output:
            return output
        assert proc.poll() is None, f"dev-cluster exited with {proc.returncode}:\n{output}"
        assert time.monotonic() < deadline, f"dev-cluster never printed {text!r}:\n{output}"
        time.sleep(0.05)


def test_dev_cluster_serves_http_on_consecutive_ports_and_stops_and_starts_brokers(tmp_path):
    port = free_ports(2)
    http_port = free_ports(2)
    log_path = tmp_path / "dev-cluster.log"
    with open(log_path, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafkacompat", "dev-cluster", "--brokers", "2", "--port", str(port),
             "--http-port", str(http_port), "--data-dir", str(tmp_path / "data")],
            stdout=sink, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        output = _wait_for_line(log_path, "dev-cluster: consoles:", proc)
        assert "dev-cluster: starting 2 broker(s): broker 0 of 2" in output
        assert "dev-cluster: starting 2 broker(s): broker 1 of 2" in output
        assert f"consoles: http://127.0.0.1:{http_port}/ http://127.0.0.1:{http_port + 1}/" in output
        first, second = (f"http://127.0.0.1:{http_port + i}" for i in range(2))
        for base, broker_id in ((first, 0), (second, 1)):
            brokers = http_request("GET", base + "/v1/brokers").json()
            assert [(b["id"], b["this_broker"], b["running"]) for b in brokers] == [
                (0, broker_id == 0, True), (1, broker_id == 1, True)]

        assert http_request("POST", first + "/v1/brokers/1/stop").status == 200
        assert {b["id"]: b["running"] for b in http_request("GET", first + "/v1/brokers").json()} == {0: True, 1: False}
        assert http_request("POST", first + "/v1/brokers/1/start").status == 200
        assert http_request("GET", second + "/v1/brokers").status == 200  # its console is back too

        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port + 1}"})
        producer.produce("after-restart", value=b"v")
        assert producer.flush(30) == 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
