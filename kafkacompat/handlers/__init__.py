"""API handlers, one module per API family. Importing this package registers them all."""

from kafkacompat.handlers.registry import REGISTRY, Handler, RequestContext, Services, handles

from kafkacompat.handlers import acls, api_versions, cluster, configs, consumer_groups, delegation_tokens, delete_records, describe_topic_partitions, fetch, groups, leaders, list_offsets, log_dirs, metadata, offset_for_leader_epoch, offsets, produce, producer_ids, quotas, reassignments, sasl, scram, shares, streams_groups, telemetry, topics, transactions, txn_markers, update_features  # noqa: E402,F401  (registration)

__all__ = ["REGISTRY", "Handler", "RequestContext", "Services", "handles"]
