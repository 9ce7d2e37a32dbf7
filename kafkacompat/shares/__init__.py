"""Share groups (KIP-932): the share-partition state on partition leaders, share sessions, the
share group membership, and the share coordinator's durable state in __share_group_state."""
