"""Fixtures: a real kafkacompat broker process on a free loopback port with a temporary data dir."""

from __future__ import annotations

import uuid

import pytest

from kafkacompat.testing.process import BrokerProcess


@pytest.fixture(autouse=True)
def _drop_admin_clients():
    yield
    from clients import drop_admin_clients

    drop_admin_clients()


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(*extra_args: str, data_dir=None, port=None) -> BrokerProcess:
        proc = BrokerProcess(data_dir or tmp_path / f"data-{len(started)}", port=port, extra_args=list(extra_args))
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
