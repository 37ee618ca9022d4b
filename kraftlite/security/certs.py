"""A cluster's own certificate authority and the certificates it signs (`kraftlite certs`):
one CA per cluster, a certificate per host naming every address it is reached at, and
client certificates whose subject is their principal (docs/security.md).

Rules:
1. Keys are ECDSA P-256: every TLS stack kraftlite meets takes them (OpenSSL under Python
   and librdkafka, Java's under Spark), and they are small and fast to sign with.
2. A host certificate is for both ends of TLS (serverAuth and clientAuth): nodes call each
   other with it. Its subjectAltName lists each of its addresses, an IP address entry for
   an IP and a DNS entry for a name; clients check the name they dialled against it.
3. A client certificate has no subjectAltName and only clientAuth; its subject, `CN=<name>`,
   is the principal `User:CN=<name>` (Kafka's default mapping).
4. Pure: keys and certificates in, PEM bytes out; the command writes the files.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest a browser accepts for a server certificate
_BACKDATE = datetime.timedelta(minutes=5)  # clocks a little behind still accept it


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, as PEM."""

    cert_pem: bytes
    key_pem: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def alt_name(host: str) -> x509.GeneralName:
    """Rule 2: an IP address entry for an IP, a DNS entry for anything else."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        if not host or any(c.isspace() or c in "/:@" for c in host):
            raise ValueError(f"{host!r} is neither an IP address nor a host name") from None
        return x509.DNSName(host)


def make_ca(common_name: str, now: datetime.datetime, days: int = CA_DAYS) -> Issued:
    """A self-signed CA that signs leaf certificates only (path length 0)."""
    key = _key()
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: Issued,
    common_name: str,
    hosts: list[str],
    now: datetime.datetime,
    days: int = LEAF_DAYS,
) -> Issued:
    """A certificate signed by `ca`: for a host (rule 2) when `hosts` names its addresses,
    for a client (rule 3) when it names none."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key is not an ECDSA key made by `kraftlite certs ca`")
    key = _key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if hosts:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        names = [alt_name(host) for host in dict.fromkeys(hosts)]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
