"""Schemathesis against the served OpenAPI document: requests generated from the document
(valid and invalid), sent to a real cluster; no answer may be a server error, and every
answer must match what the document says (status, content type, schema). Bounded examples
per operation, so it fits in CI; the cluster must be healthy afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
)
from schemathesis.config import SchemathesisConfig

from kraftlite.api.openapi import OPENAPI
from tests.harness.processes import Cluster, http

pytestmark = [
    pytest.mark.security,
    pytest.mark.timeout(600),
    # binary batches are not generated (their parser has its own corruption property tests,
    # tests/unit/test_batch_format.py); JSON bodies are
    pytest.mark.filterwarnings("ignore:Skipped test cases with unsupported payload media types"),
]
# a node's restart (api/restart.py) is taken, as documented, by any authorized request:
# fuzzed, it would restart the broker under test (tests/integration/test_rolling_restart.py
# and tests/security/test_authorization.py cover it)
#
# Schemathesis's coverage phase (boundary cases, built while pytest collects) takes 70 s on
# one operation: its boundary array is 10,000 distinct partitions (uniqueItems), which it
# builds in quadratic time. That operation keeps the examples and fuzzing phases; its item
# limit is tested in tests/inprocess/test_http_transactions.py.
CONFIG = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-name": "POST /v1/transactions/{transactional_id}/partitions",
                "phases": {"coverage": {"enabled": False}},
            }
        ]
    }
)
schema = schemathesis.openapi.from_dict(OPENAPI, config=CONFIG).exclude(path="/v1/node/restart")
STATE_DEPENDENT = {
    "INVALID_REPLICATION_FACTOR",
    "INVALID_PARTITIONS",
    "INVALID_REPLICA_ASSIGNMENT",
    "INVALID_TIMESTAMP",  # a record's timestamp against the broker's clock
    "INVALID_TRANSACTION_TIMEOUT",  # against the brokers' transaction.max.timeout.ms
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("fuzz"))
    running.start()
    try:
        status, answer = http("POST", running.urls[1] + "/v1/topics", {"name": "fuzz"})
        assert status == 201, answer
        yield running
    finally:
        running.stop()


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_the_api_answers_as_documented(case: Any, cluster: Cluster) -> None:
    # 503/504 are documented, retriable answers (no leader yet, acks not in time with a
    # fuzzed timeout_ms of 1); a 500 (an unexpected exception) is always a bug
    response = case.call(base_url=cluster.urls[1], timeout=30)
    excluded = [not_a_server_error, positive_data_acceptance]
    if response.status_code in {413, 421}:
        # refused before the body is checked, which is a refusal all the same: 413, a
        # body over the route's size limit (a fuzzed 4 MB replica assignment); 421
        # NOT_LEADER_OR_FOLLOWER with no_forward, the wrong broker saying so before it
        # reads the body (the leader checks it; fuzzed topics exist, auto-created)
        excluded.append(negative_data_rejection)
    case.validate_response(response, excluded_checks=excluded)
    assert response.status_code != 500, response.text
    # Schema-valid requests are accepted, unless what refuses them depends on the cluster's
    # state, which no schema can say (more replicas than live brokers, a topic that exists,
    # a timestamp far from the broker's clock)
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and response.status_code == 400:
        answer = response.json()
        said_in_words = (
            "but this is partition",
            "is not valid base64",
            "must not be below min.compaction.lag.ms",
            "is not compacted",
            "not '.' or '..'",  # TopicName's pattern takes them; its description does not
            "is not a cursor a table page gave",
            "read its table by partition",
            "and only on a commit",  # EndTxn's tag: on a commit, not an abort
            "a partition is named twice",  # uniqueItems, but for fields beyond the two
            "the body names the transactional producer",  # required with a header only
        )
        if any(words in answer.get("message", "") for words in said_in_words):
            return  # a record naming another partition than the path's, base64 that is
            # not, a compaction lag range that is empty, a key read of a topic that is not
            # compacted (the topic's configs), a topic named "." or "..", a table cursor no
            # page gave, a table of too many partitions, a tag on an abort: the document says
            # so in words (a JSON schema cannot)
        assert answer.get("error_code") in STATE_DEPENDENT, response.text


def test_the_cluster_is_healthy_after_the_fuzzing(cluster: Cluster) -> None:
    for url in cluster.urls.values():
        assert http("GET", url + "/readyz")[0] == 200
    status, answer = http(
        "POST", cluster.urls[2] + "/v1/topics/fuzz/records", {"records": [{"value": "ok"}]}
    )
    assert status == 200, answer
