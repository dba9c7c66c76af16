"""Certificate authorities made in a test with ``cryptography``: no files checked in, no
openssl. Certificates name 127.0.0.1 and localhost, and serve as server and client alike."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentfleet.rpc.tls import ClientTls

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True, kw_only=True, slots=True)
class IssuedCertificate:
    cert_pem: bytes
    key_pem: bytes
    serial: int

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """Writes ``<stem>.pem`` and ``<stem>.key``; returns (cert file, key file)."""
        folder.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = folder / f"{stem}.pem", folder / f"{stem}.key"
        cert_file.write_bytes(self.cert_pem)
        key_file.write_bytes(self.key_pem)
        return cert_file, key_file


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates for loopback."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._subject = subject
        self._cert = (
            _builder(subject, subject, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)

    def write(self, folder: Path) -> Path:
        """Writes the CA certificate as ``<folder>/<name>-ca.pem``."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.name}-ca.pem"
        path.write_bytes(self.cert_pem)
        return path

    def issue(self, common_name: str, hosts: tuple[str, ...] = LOOPBACK_NAMES) -> IssuedCertificate:
        """A leaf for ``hosts`` (IP addresses or DNS names), good for server and client auth."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            _builder(subject, self._subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        return IssuedCertificate(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            serial=cert.serial_number,
        )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class MutualTls:
    """A CA's files for services that serve mTLS and the clients that call them."""

    environment: dict[str, str]
    """The AGENTFLEET_TLS_* settings: each service's certificate, the CA it trusts for its
    clients, and the CA and client certificate its own calls (and the CLI's) present."""
    client: ClientTls
    """What a test's own client presents."""


def mutual_tls(folder: Path, name: str = "fleet") -> MutualTls:
    """A new CA under ``folder``, with a service and an operator (client) certificate."""
    ca = CertificateAuthority(name)
    ca_file = ca.write(folder)
    cert_file, key_file = ca.issue("service").write(folder, "service")
    client_cert, client_key = ca.issue("operator").write(folder, "operator")
    return MutualTls(
        environment={
            "AGENTFLEET_TLS_CERT_FILE": str(cert_file),
            "AGENTFLEET_TLS_KEY_FILE": str(key_file),
            "AGENTFLEET_TLS_CLIENT_CA_FILE": str(ca_file),
            "AGENTFLEET_TLS_CA_FILE": str(ca_file),
            "AGENTFLEET_TLS_CLIENT_CERT_FILE": str(client_cert),
            "AGENTFLEET_TLS_CLIENT_KEY_FILE": str(client_key),
        },
        client=ClientTls(ca_file=ca_file, cert_file=client_cert, key_file=client_key),
    )
