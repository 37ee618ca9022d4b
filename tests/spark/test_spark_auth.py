"""The Spark source and sink against a cluster with authentication on: `kraftlite.auth.*`
options carry a SCRAM user (or a token) to the driver and every executor task."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kraftlite.client import Credentials, SyncAdmin, SyncProducer
from tests.harness.processes import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]
ADMIN = Credentials("admin", "spark-admin-pw")
AUTH = {"auth.required": True, "super.users": ["User:admin"]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("spark-auth"),
        broker_config=AUTH,
        controller_config={
            **AUTH,
            "auth.bootstrap.user": "admin",
            "auth.bootstrap.password": "spark-admin-pw",
        },
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _options(cluster: Cluster, **auth: str) -> dict[str, str]:
    return {"kraftlite.bootstrap": ",".join(cluster.urls.values()), **auth}


def test_reads_and_writes_authenticate_and_are_authorized(spark: Any, secured: Cluster) -> None:
    bootstrap = list(secured.urls.values())
    with SyncAdmin(bootstrap, credentials=ADMIN) as admin:
        admin.create_topic("clicks", partitions=2)
        admin.create_topic("clicks-out", partitions=1)
        admin.create_user("analyst", "analyst-pw")
        for operation, topic in [("READ", "clicks"), ("WRITE", "clicks-out")]:
            admin.create_acl(
                principal="User:analyst",
                operation=operation,
                resource_type="TOPIC",
                resource_name=topic,
            )
    with SyncProducer(bootstrap, credentials=ADMIN) as producer:
        for i in range(50):
            producer.send("clicks", f"c{i}".encode(), key=f"k{i}".encode())
        producer.flush()
    analyst = {"kraftlite.auth.user": "analyst", "kraftlite.auth.password": "analyst-pw"}
    rows = (
        spark.read.format("kraftlite")
        .options(**_options(secured, **analyst), subscribe="clicks")
        .load()
    )
    assert sorted(bytes(r.value).decode() for r in rows.collect()) == sorted(
        f"c{i}" for i in range(50)
    )
    rows.select("key", "value").write.format("kraftlite").mode("append").options(
        **_options(secured, **analyst), topic="clicks-out"
    ).save()
    copied = (
        spark.read.format("kraftlite")
        .options(**_options(secured, **analyst), subscribe="clicks-out")
        .load()
    )
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        copied.count()  # the analyst may write clicks-out, not read it
    admin_options = _options(
        secured, **{"kraftlite.auth.user": "admin", "kraftlite.auth.password": "spark-admin-pw"}
    )
    out = spark.read.format("kraftlite").options(**admin_options, subscribe="clicks-out").load()
    assert out.count() == 50
    # without credentials, nothing
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED"):
        spark.read.format("kraftlite").options(
            **_options(secured), subscribe="clicks"
        ).load().count()
    # a bad option combination says so
    with pytest.raises(Exception, match=r"kraftlite\.auth"):
        spark.read.format("kraftlite").options(
            **_options(secured, **{"kraftlite.auth.user": "analyst"}), subscribe="clicks"
        ).load().count()
