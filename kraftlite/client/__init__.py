"""The Python client: async first (`Admin`, `Producer`, `Consumer`), with a synchronous
facade (`SyncAdmin`, `SyncProducer`, `SyncConsumer`). Errors are `KraftliteError`s with the
API's error code and a retriable flag.
"""

from kraftlite.client.admin import Admin
from kraftlite.client.consumer import Consumer, ConsumerRecord
from kraftlite.client.credentials import Credentials
from kraftlite.client.producer import Producer, RecordMetadata
from kraftlite.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from kraftlite.errors import ErrorCode, KraftliteError

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "Credentials",
    "ErrorCode",
    "KraftliteError",
    "Producer",
    "RecordMetadata",
    "SyncAdmin",
    "SyncConsumer",
    "SyncProducer",
]
