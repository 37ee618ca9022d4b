"""kraftlite: a Kafka-style replicated commit log with a Raft controller quorum."""

__version__ = "0.1.0"
