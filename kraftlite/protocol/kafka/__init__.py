"""Kafka's wire protocol, pure: primitive types (wire.py), request and response messages
(messages.py) and record batches (records.py). The Kafka listener (kraftlite/kafka/) and the
Spark resolver both speak it; nothing here does I/O."""
