"""TLS everywhere on a real cluster, with a CA made in the test (trustme): https listeners,
nodes calling each other over TLS with their certificates, a client certificate's subject
as the principal, and plain HTTP or an untrusted certificate refused.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.harness.processes import TLS_CONTEXT, Cluster, http

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("tls")
    node = ca.issue_cert("127.0.0.1", "localhost", common_name="kraftlite-node")
    node.cert_chain_pems[0].write_to_path(str(root / "node.pem"))
    for blob in node.cert_chain_pems[1:]:
        blob.write_to_path(str(root / "node.pem"), append=True)
    node.private_key_pem.write_to_path(str(root / "node.key"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    settings = {
        "tls.cert.file": str(root / "node.pem"),
        "tls.key.file": str(root / "node.key"),
        "tls.ca.file": str(root / "ca.pem"),
        "tls.client.auth": "requested",
        "auth.required": True,
        "super.users": ["User:CN=ops,OU=operations,O=kraftlite-tests"],
    }
    client = ssl.create_default_context(cafile=str(root / "ca.pem"))
    ops = ca.issue_cert(
        "ops@example.org",
        common_name="ops",
        organization_name="kraftlite-tests",
        organization_unit_name="operations",
    )
    ops.configure_cert(client)  # the harness's own calls present the super user's certificate
    TLS_CONTEXT.append(client)
    ops.cert_chain_pems[0].write_to_path(str(root / "ops.pem"))
    ops.private_key_pem.write_to_path(str(root / "ops.key"))
    running = Cluster(
        root, broker_config=settings, controller_config=settings, scheme="https", kafka=True
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()
        TLS_CONTEXT.remove(client)


def _context(ca: trustme.CA, tmp: Path, common_name: str | None) -> ssl.SSLContext:
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    context = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
    if common_name is not None:
        ca.issue_cert(f"{common_name}@example.org", common_name=common_name).configure_cert(context)
    return context


def _get(url: str, context: ssl.SSLContext) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        body = error.read().decode()
        error.close()
        return error.code, body


def test_the_cluster_runs_over_tls(cluster: Cluster) -> None:
    """Brokers registered, replicated and answered over https: the super user's certificate
    creates a topic and produces with acks=all to three replicas."""
    url = cluster.urls[1]
    assert url.startswith("https://")
    status, answer = http("POST", url + "/v1/topics", {"name": "secure", "replication_factor": 3})
    assert status == 201, answer
    status, answer = http(
        "POST",
        cluster.urls[2] + "/v1/topics/secure/records?acks=all",
        {"records": [{"value": "x"}]},
    )
    assert status == 200, answer
    status, view = http("GET", cluster.quorum.urls[1] + "/v1/cluster")
    assert status == 200
    assert all(b["url"].startswith("https://") for b in view["brokers"])


def test_a_client_certificate_is_its_principal(
    cluster: Cluster, ca: trustme.CA, tmp_path: Path
) -> None:
    url = cluster.urls[1] + "/v1/users"
    status, body = _get(url, _context(ca, tmp_path, "dave"))  # authenticated, not authorized
    assert status == 403 and "CLUSTER_AUTHORIZATION_FAILED" in body
    assert "User:CN=dave" in body
    status, body = _get(url, _context(ca, tmp_path, None))  # no certificate: no principal
    assert status == 401 and "SASL_AUTHENTICATION_FAILED" in body


def test_plain_http_and_untrusted_certificates_get_nowhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    plain = cluster.urls[1].replace("https://", "http://") + "/readyz"
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain, timeout=5).close()
    stranger = trustme.CA()  # a certificate from another CA
    stranger.cert_pem.write_to_path(str(tmp_path / "other.pem"))
    context = ssl.create_default_context(cafile=str(tmp_path / "other.pem"))
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(cluster.urls[1] + "/readyz", timeout=5, context=context).close()
    untrusted_client = ssl.create_default_context()
    untrusted_client.check_hostname = False
    untrusted_client.verify_mode = ssl.CERT_NONE
    stranger.issue_cert("x@example.org", common_name="admin").configure_cert(untrusted_client)
    # a certificate the cluster's CA did not sign: the handshake is refused
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _get(cluster.urls[1] + "/v1/cluster", untrusted_client)


def test_kafka_clients_use_tls_and_a_client_certificate_is_their_principal(
    cluster: Cluster,
) -> None:
    """The Kafka listener takes the broker's TLS settings: a client certificate's subject
    is the principal, as over HTTPS; without one (and no SASL) nothing but ApiVersions."""
    from confluent_kafka import KafkaException, Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    tls = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.root / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "none",
    }
    ops = {
        **tls,
        "ssl.certificate.location": str(cluster.root / "ops.pem"),
        "ssl.key.location": str(cluster.root / "ops.key"),
    }
    admin = AdminClient(ops)
    admin.create_topics([NewTopic("over-tls", num_partitions=1, replication_factor=3)])[
        "over-tls"
    ].result(30)
    producer = Producer(ops)
    errors: list[object] = []
    producer.produce("over-tls", b"secret", partition=0, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]
    anonymous = AdminClient(tls)
    with pytest.raises(KafkaException):
        anonymous.list_topics(timeout=5)


def test_a_kafka_listener_resolves_to_the_https_side_over_tls_only(
    cluster: Cluster, ca: trustme.CA, tmp_path: Path
) -> None:
    """The Spark source's Kafka exchange (resolve.py) runs over TLS with the job's CA and
    client certificate, and trusts no other certificate."""
    from kraftlite.client import Credentials  # noqa: PLC0415
    from kraftlite.spark.options import Security  # noqa: PLC0415
    from kraftlite.spark.resolve import kafka_http_url  # noqa: PLC0415

    host, port = cluster.kafka_addresses[1].rsplit(":", 1)
    ops = Credentials(
        ca_file=str(cluster.root / "ca.pem"),
        cert_file=str(cluster.root / "ops.pem"),
        key_file=str(cluster.root / "ops.key"),
    )
    found = kafka_http_url(host, int(port), 10, Security(ops, tls=True))
    assert found.startswith("https://") and found.rstrip("/") == cluster.urls[1].rstrip("/")
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    stranger = Credentials(ca_file=str(tmp_path / "other-ca.pem"))
    with pytest.raises(ssl.SSLCertVerificationError):
        kafka_http_url(host, int(port), 10, Security(stranger, tls=True))
