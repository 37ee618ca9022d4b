"""A Quix Streams application (run by tests/integration/test_quix_streams.py in a virtualenv
of its own): counts each key's words in a RocksDB store whose changelog is a compacted
topic, writes each count to `counts`, and stops after `count` messages.

Usage: quix_counter.py BOOTSTRAP STATE_DIR COUNT
"""

import json
import sys

from quixstreams import Application

bootstrap, state_dir, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
app = Application(
    broker_address=bootstrap,
    consumer_group="counter",
    auto_offset_reset="earliest",
    state_dir=state_dir,
    commit_interval=0.5,
)
words = app.topic("words", value_deserializer="str", key_deserializer="str")
counts = app.topic("counts", value_serializer="json", key_serializer="str")
seen: list[dict[str, object]] = []


def count_it(value: str, state: object) -> dict[str, object]:
    total = state.get("total", 0) + 1  # type: ignore[attr-defined]
    state.set("total", total)  # type: ignore[attr-defined]
    return {"word": value, "total": total}


def stop_after(value: dict[str, object]) -> None:
    seen.append(value)
    if len(seen) >= count:
        app.stop()


sdf = app.dataframe(words).apply(count_it, stateful=True).to_topic(counts)
sdf.update(stop_after)
app.run()
print("COUNTS", json.dumps(seen), flush=True)
