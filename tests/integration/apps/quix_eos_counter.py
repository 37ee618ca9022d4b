"""A Quix Streams application with exactly-once processing (run by
tests/integration/test_quix_streams.py in a virtualenv of its own): counts each key's words
in a RocksDB store, writes each count to `eos-counts`, and commits its input offsets, its
changelog and its output in one Kafka transaction per checkpoint. It runs until killed.

Usage: quix_eos_counter.py BOOTSTRAP STATE_DIR DELAY_S (a pause per word, so a kill lands
mid-stream)
"""

import sys
import time

from quixstreams import Application

bootstrap, state_dir, delay_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
app = Application(
    broker_address=bootstrap,
    consumer_group="eos-counter",
    auto_offset_reset="earliest",
    state_dir=state_dir,
    commit_interval=0.3,
    processing_guarantee="exactly-once",
    # a killed instance's partitions go to the next one after this (not librdkafka's 45 s)
    consumer_extra_config={"session.timeout.ms": 6000},
    # each instance has a transactional id of its own, so a killed one's open transaction
    # ends only by its timeout (the coordinator aborts it): 5 s, not librdkafka's 60 s
    producer_extra_config={"transaction.timeout.ms": 5000},
)
words = app.topic("eos-words", value_deserializer="str", key_deserializer="str")
counts = app.topic("eos-counts", value_serializer="json", key_serializer="str")


def count_it(value: str, state: object) -> dict[str, object]:
    time.sleep(delay_s)
    total = state.get("total", 0) + 1  # type: ignore[attr-defined]
    state.set("total", total)  # type: ignore[attr-defined]
    return {"word": value, "total": total}


app.dataframe(words).apply(count_it, stateful=True).to_topic(counts)
print("RUNNING", flush=True)
app.run()
