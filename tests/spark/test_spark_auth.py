"""The Spark source and sink against a cluster with authentication on: `kraftlite.auth.*`
options, or a Kafka job's SASL options, carry a SCRAM user (or a token) to the driver and
every executor task."""

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
        kafka=True,
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
    sink = rows.select("key", "value").write.format("kraftlite").mode("append")
    # the exactly-once sink (the default) writes as transactional ids of its prefix
    with pytest.raises(Exception, match="grant the job's user WRITE on the TRANSACTIONAL_ID"):
        sink.options(**_options(secured, **analyst), topic="clicks-out").save()
    with SyncAdmin(bootstrap, credentials=ADMIN) as admin:
        admin.create_acl(
            principal="User:analyst",
            operation="WRITE",
            resource_type="TRANSACTIONAL_ID",
            resource_name="kraftlite-spark-",
            pattern_type="PREFIXED",
        )
    sink.options(**_options(secured, **analyst), topic="clicks-out").save()
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


def test_a_kafka_job_s_sasl_login_is_a_kraftlite_user(spark: Any, secured: Cluster) -> None:
    bootstrap = list(secured.urls.values())
    with SyncAdmin(bootstrap, credentials=ADMIN) as admin:
        admin.create_topic("sasl-in", partitions=2)
        admin.create_topic("sasl-out", partitions=1)
        admin.create_user("porter", 'porter "pw"')
        for operation, topic in [("READ", "sasl-in"), ("WRITE", "sasl-out")]:
            admin.create_acl(
                principal="User:porter",
                operation=operation,
                resource_type="TOPIC",
                resource_name=topic,
            )
    with SyncProducer(bootstrap, credentials=ADMIN) as producer:
        for i in range(20):
            producer.send("sasl-in", f"s{i}".encode())
        producer.flush()

    def kafka_job(mechanism: str, module: str, password: str = 'porter \\"pw\\"') -> dict:
        return {  # as a Kafka job has them; the brokers by their HTTP host:port
            "kafka.bootstrap.servers": ",".join(u.removeprefix("http://") for u in bootstrap),
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": f"org.apache.kafka.common.security.{module} required "
            f'username="porter" password="{password}";',
        }

    scram = kafka_job("SCRAM-SHA-512", "scram.ScramLoginModule")
    rows = spark.read.format("kraftlite").options(**scram, subscribe="sasl-in").load()
    assert sorted(bytes(r.value).decode() for r in rows.collect()) == sorted(
        f"s{i}" for i in range(20)
    )
    rows.select("value").write.format("kraftlite").mode("append").options(
        **kafka_job("PLAIN", "plain.PlainLoginModule"),
        topic="sasl-out",
        deliveryGuarantee="at-least-once",  # needs no transactional id ACL
    ).save()
    admin_options = _options(
        secured, **{"kraftlite.auth.user": "admin", "kraftlite.auth.password": "spark-admin-pw"}
    )
    out = spark.read.format("kraftlite").options(**admin_options, subscribe="sasl-out").load()
    assert out.count() == 20
    wrong = kafka_job("SCRAM-SHA-256", "scram.ScramLoginModule", password="guess")
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED"):
        spark.read.format("kraftlite").options(**wrong, subscribe="sasl-in").load().count()


def test_a_kafka_job_naming_kafka_listeners_logs_in_to_them(spark: Any, secured: Cluster) -> None:
    """The Kafka addresses are resolved to HTTP URLs over Kafka's protocol, after a SCRAM
    login: an anonymous client would be answered nothing on this cluster."""
    bootstrap = list(secured.urls.values())
    with SyncAdmin(bootstrap, credentials=ADMIN) as admin:
        admin.create_topic("kafka-named", partitions=2)
        admin.create_user("kafkajob", "kafkajob-pw")  # SCRAM-SHA-256, the default
        admin.create_acl(
            principal="User:kafkajob",
            operation="READ",
            resource_type="TOPIC",
            resource_name="kafka-named",
        )
    with SyncProducer(bootstrap, credentials=ADMIN) as producer:
        for i in range(10):
            producer.send("kafka-named", f"k{i}".encode())
        producer.flush()

    def kafka_job(password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": ",".join(secured.kafka_addresses.values()),
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="kafkajob" password="{password}";',
            "subscribe": "kafka-named",
        }

    rows = spark.read.format("kraftlite").options(**kafka_job("kafkajob-pw")).load()
    assert sorted(bytes(r.value).decode() for r in rows.collect()) == sorted(
        f"k{i}" for i in range(10)
    )
    for refused in [kafka_job("guess"), kafka_job("kafkajob-pw", mechanism="SCRAM-SHA-512")]:
        with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as failed:
            spark.read.format("kraftlite").options(**refused).load().count()
        assert "guess" not in str(failed.value)
