"""`kraftlite certs` (kraftlite/security/certs.py, kraftlite/cli/certs.py): the certificates
work in real TLS handshakes, by the name a client dialled, and the files are kept safe."""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509

from kraftlite.cli import main
from kraftlite.security import certs

NOW = datetime.datetime.now(datetime.UTC)


def handshake(
    tmp: Path,
    server: certs.Issued,
    ca: certs.Issued,
    dialled: str,
    client: certs.Issued | None = None,
) -> str | None:
    """A TLS handshake over a socket pair, the client checking `dialled` against the
    server's certificate; the client certificate's subject as the server saw it."""
    (tmp / "ca.pem").write_bytes(ca.cert_pem)
    for name, made in (("server", server), ("client", client)):
        if made is not None:
            (tmp / f"{name}.pem").write_bytes(made.cert_pem)
            (tmp / f"{name}.key").write_bytes(made.key_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp / "server.pem", tmp / "server.key")
    server_context.load_verify_locations(tmp / "ca.pem")
    server_context.verify_mode = ssl.CERT_OPTIONAL
    client_context = ssl.create_default_context(cafile=tmp / "ca.pem")
    if client is not None:
        client_context.load_cert_chain(tmp / "client.pem", tmp / "client.key")
    left, right = socket.socketpair()
    seen: list[str | None] = []
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(right, server_side=True) as tls:
                der = tls.getpeercert(binary_form=True)
                seen.append(
                    None
                    if der is None
                    else x509.load_der_x509_certificate(der).subject.rfc4514_string()
                )
        except (ssl.SSLError, OSError) as exc:
            failures.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(left, server_hostname=dialled):
            pass
    finally:
        left.close()
        thread.join(5)
    return seen[0] if seen else None


def test_a_host_certificate_is_good_for_each_address_it_names_and_no_other(tmp_path: Path) -> None:
    ca = certs.make_ca("test CA", NOW)
    host = certs.issue(ca, "broker-1", ["10.88.4.2", "broker-1.example"], NOW)
    assert handshake(tmp_path, host, ca, "10.88.4.2") is None
    assert handshake(tmp_path, host, ca, "broker-1.example") is None
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(tmp_path, host, ca, "10.88.5.2")
    other_ca = certs.make_ca("another CA", NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tmp_path, host, other_ca, "10.88.4.2")


def test_a_client_certificate_names_its_principal_and_serves_no_host(tmp_path: Path) -> None:
    ca = certs.make_ca("test CA", NOW)
    server = certs.issue(ca, "broker-1", ["127.0.0.1"], NOW)
    alice = certs.issue(ca, "alice", [], NOW)
    assert handshake(tmp_path, server, ca, "127.0.0.1", client=alice) == "CN=alice"
    parsed = x509.load_pem_x509_certificate(alice.cert_pem)
    usages = parsed.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(x509.ExtensionNotFound):
        parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_a_leaf_never_outlives_its_ca() -> None:
    ca = certs.make_ca("short CA", NOW, days=10)
    leaf = x509.load_pem_x509_certificate(certs.issue(ca, "b", ["10.0.0.1"], NOW).cert_pem)
    assert leaf.not_valid_after_utc <= NOW + datetime.timedelta(days=10)


@pytest.mark.parametrize("host", ["", "two words", "http://x", "a/b"])
def test_what_is_no_address_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="neither"):
        certs.alt_name(host)


def test_the_command_writes_private_keys_for_their_owner_only(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["certs", "ca", str(tmp_path / "pki")])
    assert done.exit_code == 0, done.output
    done = runner.invoke(
        main, ["certs", "issue", str(tmp_path / "pki"), "broker-1", "--host", "10.88.4.2"]
    )
    assert done.exit_code == 0, done.output
    for key in ("ca.key", "broker-1.key"):
        assert stat.S_IMODE((tmp_path / "pki" / key).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "pki" / "broker-1.pem").stat().st_mode) == 0o644
    # nothing replaced by accident
    again = runner.invoke(main, ["certs", "ca", str(tmp_path / "pki")])
    assert again.exit_code == 1 and "--force" in again.output
    again = runner.invoke(main, ["certs", "issue", str(tmp_path / "pki"), "broker-1"])
    assert again.exit_code == 1 and "exists" in again.output


def test_the_command_says_what_is_wrong(tmp_path: Path) -> None:
    runner = CliRunner()
    (tmp_path / "empty").mkdir()
    done = runner.invoke(main, ["certs", "issue", str(tmp_path / "empty"), "b", "--host", "h"])
    assert done.exit_code == 1 and "kraftlite certs ca" in done.output
    runner.invoke(main, ["certs", "ca", str(tmp_path / "pki")])
    done = runner.invoke(main, ["certs", "issue", str(tmp_path / "pki"), "b", "--host", "a b"])
    assert done.exit_code == 1 and "neither" in done.output
    done = runner.invoke(main, ["certs", "issue", str(tmp_path / "pki"), "../b"])
    assert done.exit_code == 2
    assert not list((tmp_path / "pki").glob("b.*"))
