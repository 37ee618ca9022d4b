"""HTTP headers and media types of the kraftlite API, shared by brokers, controllers, clients
and the Spark source (the protocol, not the server's edge: clients import this, never api/)."""

from typing import Final

# A client that routes by metadata itself: answer 421/503 with the leader, do not forward.
NO_FORWARD: Final = "X-Kraftlite-No-Forward"
# Set on a request one node forwarded to another: never forwarded again (one hop).
FORWARDED: Final = "X-Kraftlite-Forwarded"
# On admin writes: the metadata version that holds the change (read-your-writes on brokers).
METADATA_VERSION: Final = "X-Kraftlite-Metadata-Version"

# On a produce of a transactional producer's batch: its transactional id (issue 27).
TRANSACTIONAL_ID: Final = "X-Kraftlite-Transactional-Id"

# On a fetch's answer: the offset the next fetch asks for (past markers and, with
# read_committed, aborted records the answer leaves out).
NEXT_OFFSET: Final = "X-Kraftlite-Next-Offset"

# The binary record batch (protocol/batch.py, docs/batch-format.md).
BATCH_TYPE: Final = "application/vnd.kraftlite.batch"
# A fetch's Accept for stored batches in every format up to 3 as they are (3: a Kafka batch
# kept as sent, compressed, which protocol/stored.py decodes): nothing converted on the
# leader. Without `format`, a reader takes formats 1 and 2 only.
STORED_BATCHES_ACCEPT: Final = BATCH_TYPE + "; format=3"


def batch_format_read(accept: str) -> int:
    """The newest batch format an Accept header says its reader takes: its `format`
    parameter on BATCH_TYPE (RFC 9110: the name in any case, the value maybe quoted), 2
    when it names none, 0 when it does not take BATCH_TYPE at all."""
    newest = 0
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() != BATCH_TYPE:
            continue
        newest = max(newest, 2)
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "format" and value.strip().strip('"').isdigit():
                newest = max(newest, int(value.strip().strip('"')))
    return newest


# A partition's records as Kafka record batches (magic 2), as a Kafka producer sends them,
# compressed or not: stored as sent where they can be (docs/batch-format.md "Format 3").
KAFKA_BATCHES_TYPE: Final = "application/vnd.kraftlite.kafka-batches"
# On a produce's answer when its records were not its body as sent (compressed Kafka
# batches): the bytes they came to, which the quota charges (a relaying broker reads it).
PRODUCED_BYTES: Final = "X-Kraftlite-Produced-Bytes"
