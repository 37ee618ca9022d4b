"""What every Kafka API module answers with: Kafka's success code, kraftlite's errors as
Kafka's codes (handlers.py rule 3), error messages cut to what an answer carries, and the
longest an admin request may wait. Shared by handlers.py and the API modules it registers
(which handlers.py imports, so they cannot import it)."""

from __future__ import annotations

from typing import Final

from kraftlite.errors import ErrorCode, KraftliteError

NONE: Final = 0  # Kafka's error code for success
INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)
MAX_ADMIN_TIMEOUT_MS: Final = 60_000
MAX_MESSAGE: Final = 1024  # error messages sent back are cut here (classic strings hold 32 KiB)


def kafka_code(exc: KraftliteError) -> int:
    """kraftlite codes with no Kafka equivalent (>= 1000) answer INVALID_REQUEST.
    TRANSACTION_ABORTABLE goes out as INVALID_TXN_STATE: no version this listener serves
    has it (Produce v11, EndTxn v4 and the like add it; docs/design/kafka-transactions.md
    D3)."""
    if exc.code is ErrorCode.TRANSACTION_ABORTABLE:
        return int(ErrorCode.INVALID_TXN_STATE)
    return INVALID_REQUEST if exc.code >= 1000 else int(exc.code)


def message(exc: KraftliteError) -> str:
    return exc.message[:MAX_MESSAGE]
