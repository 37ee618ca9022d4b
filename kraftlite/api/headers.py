"""HTTP headers of the kraftlite API, shared by brokers, controllers and clients."""

from typing import Final

# A client that routes by metadata itself: answer 421/503 with the leader, do not forward.
NO_FORWARD: Final = "X-Kraftlite-No-Forward"
# Set on a request one node forwarded to another: never forwarded again (one hop).
FORWARDED: Final = "X-Kraftlite-Forwarded"
# On admin writes: the metadata version that holds the change (read-your-writes on brokers).
METADATA_VERSION: Final = "X-Kraftlite-Metadata-Version"
