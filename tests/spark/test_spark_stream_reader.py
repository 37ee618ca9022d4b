"""The stream reader driven by hand, as Spark's stream runner drives it, against a real
cluster (no Spark session needed): a topic deleted and created again while a query reads it
is data loss (failOnDataLoss) or is read from its beginning; the no-argument `latestOffset`
of pyspark 4.0/4.1 never goes back behind what Spark was shown; minOffsetsPerTrigger holds
triggers back until maxTriggerDelay.
"""

from __future__ import annotations

import time

import pytest

from kraftlite.spark.arrow import default_columns
from kraftlite.spark.cluster import DataLossError
from kraftlite.spark.options import Options
from kraftlite.spark.source import ReadSettings
from kraftlite.spark.stream import KraftliteStreamReader, ReadAllAvailable, ReadMinRows
from tests.harness.processes import Cluster, http
from tests.spark.support import bootstrap, send

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def stream_reader(cluster: Cluster, topic: str, **options: str) -> KraftliteStreamReader:
    given = Options({"kraftlite.bootstrap": bootstrap(cluster), "subscribe": topic, **options})
    return KraftliteStreamReader(given, ReadSettings.of(given, default_columns(False)))


def create(cluster: Cluster, topic: str) -> None:
    deadline = time.monotonic() + 30
    while True:  # a deletion takes a moment to reach every broker
        status, body = http("POST", cluster.urls[1] + "/v1/topics", {"name": topic})
        if status == 201:
            return
        assert status == 409 and time.monotonic() < deadline, body
        time.sleep(0.2)


def test_a_topic_created_again_is_data_loss_or_read_from_its_beginning(
    cluster: Cluster,
) -> None:
    create(cluster, "reborn")
    send(cluster, "reborn", 1, 10)
    strict = stream_reader(cluster, "reborn", startingOffsets="earliest")
    lenient = stream_reader(cluster, "reborn", startingOffsets="earliest", failOnDataLoss="false")
    ends = {}
    for reader in (strict, lenient):
        start = reader.initialOffset()
        ends[reader] = reader.latestOffset(start, None)
        assert ends[reader] == {"reborn": {"0": 10}}
        assert [(r.start, r.end) for r in reader.partitions(start, ends[reader])] == [(0, 10)]

    assert http("DELETE", cluster.urls[1] + "/v1/topics/reborn")[0] == 204
    create(cluster, "reborn")
    send(cluster, "reborn", 1, 4)

    with pytest.raises(DataLossError, match="topic reborn was deleted and created again"):
        strict.latestOffset(ends[strict], None)
    reset = lenient.latestOffset(ends[lenient], None)
    assert reset == {"reborn": {"0": 0}}  # the new topic, from its beginning
    assert lenient.partitions(ends[lenient], reset) == []
    again = lenient.latestOffset(reset, None)
    assert [(r.start, r.end) for r in lenient.partitions(reset, again)] == [(0, 4)]


def test_without_a_start_latest_offset_keeps_what_spark_was_shown(cluster: Cluster) -> None:
    """pyspark 4.0/4.1 call latestOffset() with no arguments."""
    create(cluster, "shown")
    send(cluster, "shown", 1, 6)
    reader = stream_reader(cluster, "shown", startingOffsets="earliest")
    start = reader.initialOffset()
    assert reader.latestOffset() == {"shown": {"0": 6}}
    # Spark planned further than the high watermark now says (a new leader's, briefly lower)
    reader.partitions(start, {"shown": {"0": 9}})
    assert reader.latestOffset() == {"shown": {"0": 9}}  # not back to 6: no record twice


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def now_ms(self) -> int:
        return self.now

    def monotonic_ms(self) -> int:
        return self.now


def test_min_offsets_per_trigger_holds_triggers_back_until_the_delay(cluster: Cluster) -> None:
    if ReadMinRows is None:
        pytest.skip("read limits need pyspark 4.2 or newer")
    create(cluster, "trickle")
    send(cluster, "trickle", 1, 4)
    reader = stream_reader(
        cluster,
        "trickle",
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="30s",
    )
    reader.clock = clock = ManualClock()
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    start = reader.initialOffset()
    first = reader.latestOffset(start, limit)
    assert first == {"trickle": {"0": 4}}  # a run's first micro-batch is never held back
    send(cluster, "trickle", 1, 3, first=4)
    assert reader.latestOffset(first, limit) == first  # 3 waiting, fewer than 10
    clock.now += 29_999
    assert reader.latestOffset(first, limit) == first
    clock.now += 1  # maxTriggerDelay since the last micro-batch
    second = reader.latestOffset(first, limit)
    assert second == {"trickle": {"0": 7}}
    send(cluster, "trickle", 1, 10, first=7)
    third = reader.latestOffset(second, limit)
    assert third == {"trickle": {"0": 17}}  # 10 waiting: at once
    send(cluster, "trickle", 1, 2, first=17)
    assert reader.latestOffset(third, limit) == third
    assert reader.latestOffset(third, ReadAllAvailable()) == {"trickle": {"0": 19}}  # Once
    reader.prepareForTriggerAvailableNow()  # AvailableNow never waits for more
    assert reader.latestOffset(third, limit) == {"trickle": {"0": 19}}
