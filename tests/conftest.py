"""Shared fixtures and helpers for the unit and in-process tests."""

from __future__ import annotations

import functools

import pytest
import trio

from kafkacompat.testing.zookeeper import ZooKeeperServer, zookeeper_available


def trio_test(fn):
    """Run an async test function under trio.run (the project has no pytest-trio)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return trio.run(functools.partial(fn, *args, **kwargs))

    return wrapper


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """A real standalone ZooKeeper on a free loopback port, one per test module."""
    if not zookeeper_available():
        pytest.fail("ZooKeeper is not installed: scripts/test.sh installs it (apt-get install zookeeper)")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()
