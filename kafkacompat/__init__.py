"""kafkacompat: a Kafka wire-protocol-compatible broker on Trio."""

__version__ = "0.1.0"
