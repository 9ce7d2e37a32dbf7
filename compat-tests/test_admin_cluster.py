"""DescribeCluster with confluent-kafka's and kafka-python's admin clients, and raw requests for
the endpoint types (KIP-919) the clients do not send."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

pytest.register_assert_rewrite("clients")
from clients import RawConnection  # noqa: E402

from clients import request_class, response_class  # noqa: E402

DESCRIBE_CLUSTER = 60
TIMEOUT = 15
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE"}


def cluster_id_on_disk(broker) -> str:
    lines = (broker.data_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)["cluster.id"]


def raw_describe_cluster(broker, version: int, **fields):
    request = request_class(DESCRIBE_CLUSTER)(version=version, **fields)
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(request, response_class(DESCRIBE_CLUSTER), version)


def test_confluent_describe_cluster(broker):
    # librdkafka answers describe_cluster from Metadata (v10 when authorized operations are
    # wanted), not from DescribeCluster; the raw and kafka-python tests cover DescribeCluster.
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = client.describe_cluster().result(timeout=TIMEOUT)
    assert result.cluster_id == cluster_id_on_disk(broker)
    assert result.controller.id == 0
    assert [(node.id, node.host, node.port) for node in result.nodes] == [(0, "127.0.0.1", broker.port)]


def test_kafka_python_describe_cluster(broker):
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = client.describe_cluster()
    finally:
        client.close()
    assert result["cluster_id"] == cluster_id_on_disk(broker)
    assert result["controller_id"] == 0
    assert [(b["broker_id"], b["port"], b["rack"]) for b in result["brokers"]] == [(0, broker.port, None)]
    assert set(result["authorized_operations"]) == CLUSTER_OPERATIONS  # no authorizer: everything is allowed


def test_rack_is_reported(broker_factory):
    broker = broker_factory("--set", "broker.rack=r1")
    response = raw_describe_cluster(broker, 1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert [b.rack for b in response.brokers] == ["r1"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_version(broker, version):
    fields = {"include_cluster_authorized_operations": False}
    if version >= 1:
        fields["endpoint_type"] = 1
    if version >= 2:
        fields["include_fenced_brokers"] = True
    response = raw_describe_cluster(broker, version, **fields)
    assert (response.error_code, response.error_message) == (0, None)
    assert (response.cluster_id, response.controller_id) == (cluster_id_on_disk(broker), 0)
    assert response.authorized_operations is None  # INT32_MIN: not requested
    if version >= 2:
        assert [b.is_fenced for b in response.brokers] == [False]


def test_controller_endpoints_are_not_served_here(broker):
    response = raw_describe_cluster(broker, 1, include_cluster_authorized_operations=False, endpoint_type=2)
    assert response.error_code == KafkaError.MISMATCHED_ENDPOINT_TYPE
    assert response.error_message == (
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
    unknown = raw_describe_cluster(broker, 1, include_cluster_authorized_operations=False, endpoint_type=9)
    assert (unknown.error_code, unknown.error_message) == (
        KafkaError.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 9")
