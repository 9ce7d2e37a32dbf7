"""segmentio/kafka-go 0.2 (Debian's golang-github-segmentio-kafka-go-dev), built in GOPATH mode as
go/ builds Sarama: its Conn sends CreateTopics v0 (which Kafka served until 4.0), DeleteTopics v1,
Metadata v0, Produce v2 and Fetch v2 with message sets, through the small CLI in kafkago/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

GO_DIR = Path(__file__).parent / "kafkago"
GOPATH = Path("/usr/share/gocode")
KAFKA_GO_SRC = GOPATH / "src/github.com/segmentio/kafka-go"
INSTALL_HINT = "scripts/test.sh installs it: apt-get install golang-go golang-github-segmentio-kafka-go-dev"


@pytest.fixture(scope="module")
def kafka_go_cli(tmp_path_factory) -> Path:
    go = shutil.which("go")
    assert go, f"the Go toolchain is missing; {INSTALL_HINT}"
    assert (KAFKA_GO_SRC / "conn.go").is_file(), f"kafka-go's sources are missing from {KAFKA_GO_SRC}; {INSTALL_HINT}"
    out = tmp_path_factory.mktemp("kafka-go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "", "GOENV": "off",
           "GOPROXY": "off", "CGO_ENABLED": "0"}
    if not env.get("GOCACHE") and not env.get("HOME") and not env.get("XDG_CACHE_HOME"):
        env["GOCACHE"] = str(out / "go-build")
    binary = out / "kafkago-cli"
    done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_DIR, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"go build failed:\n{done.stderr[-6000:]}"
    return binary


def test_kafka_go_0_2_creates_writes_reads_and_deletes_a_topic(kafka_go_cli, broker, topic_name):
    done = subprocess.run([str(kafka_go_cli), broker.bootstrap, topic_name], capture_output=True, text=True,
                          timeout=120)
    steps = {line["step"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert steps["createTopics"]["error"] is None
    assert steps["createTopicsAgain"]["error"] is None  # kafka-go reads TOPIC_ALREADY_EXISTS as success
    assert "Invalid Topic" in steps["createInvalidTopic"]["error"]
    assert steps["readPartitions"] == {"step": "readPartitions", "error": None, "result": [0, 1]}
    assert steps["writeMessages"]["error"] is None
    assert steps["readBatch"]["result"] == ["one", "two"]
    assert steps["deleteTopics"]["error"] is None
    assert "Unknown Topic Or Partition" in steps["deleteTopicsAgain"]["error"]
    assert not any(p.name.startswith(f"{topic_name}-") for p in broker.data_dir.iterdir())
