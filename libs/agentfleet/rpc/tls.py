"""TLS for the gRPC servers and channels: certificates from files, reloaded on change.

A server with a certificate and key serves TLS; with a client CA as well it requires every
client to present a certificate signed by that CA (mTLS), refused at the handshake
otherwise. The server asks :class:`ServerCertificateFiles` for its configuration on every
new connection; the files are read again when one of them changes (a renewed certificate,
a Kubernetes Secret update), so new connections get the new certificate without a restart,
while connections already open keep theirs.

Channels (services calling each other, the CLI) use TLS when a CA file is set, verifying
the server with it and presenting their own certificate when one is set. Their files are
read when the channel opens.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agentfleet.config import Settings
from agentfleet.errors import FailedPrecondition

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerTls:
    """The files of a TLS server (AGENTFLEET_TLS_CERT_FILE, _KEY_FILE, _CLIENT_CA_FILE)."""

    cert_file: Path
    """PEM certificate chain the server presents."""
    key_file: Path
    """PEM private key of that certificate."""
    client_ca_file: Path | None = None
    """PEM CA bundle client certificates must be signed by; set = mTLS required."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientTls:
    """The files of a TLS channel (AGENTFLEET_TLS_CA_FILE, _CLIENT_CERT_FILE, _CLIENT_KEY_FILE)."""

    ca_file: Path | None = None
    """PEM CA bundle that verifies servers; None = the system's roots."""
    cert_file: Path | None = None
    """PEM certificate this client presents to mTLS servers."""
    key_file: Path | None = None


def server_tls(settings: Settings) -> ServerTls | None:
    """The server's TLS files from settings; None = plain text."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    return ServerTls(
        cert_file=settings.tls_cert_file,
        key_file=settings.tls_key_file,
        client_ca_file=settings.tls_client_ca_file,
    )


def client_tls(settings: Settings) -> ClientTls | None:
    """The channels' TLS files from settings; None = plain text (no CA file set)."""
    if settings.tls_ca_file is None:
        return None
    return ClientTls(
        ca_file=settings.tls_ca_file,
        cert_file=settings.tls_client_cert_file,
        key_file=settings.tls_client_key_file,
    )


class CertificateError(FailedPrecondition):
    """TLS files that cannot serve: unreadable, not PEM, or a key that is not the cert's."""


class ServerCertificateFiles:
    """The server's certificate configuration, read again when a file changes.

    :meth:`fetch` is grpc's certificate-configuration fetcher: called for each new
    connection, it returns None while the files are unchanged (a ``stat`` per file), the
    new configuration after a change, and keeps the current one (with a warning) when the
    new files do not make a usable pair yet, e.g. the certificate is renewed before its key.
    """

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._identity = self._files_identity()
        self.configuration = _read_configuration(tls)
        """The configuration in use (raises :class:`CertificateError` at start if bad)."""

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.configuration,
            self.fetch,
            require_client_authentication=self._tls.client_ca_file is not None,
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            identity = self._files_identity()
        except OSError:
            return None  # mid-update (a file briefly missing): keep serving the current one
        if identity == self._identity:
            return None
        try:
            configuration = _read_configuration(self._tls)
        except CertificateError as exc:
            log.warning("tls_reload_skipped", error=str(exc))
            return None
        self._identity = identity
        self.configuration = configuration
        log.info("tls_certificate_reloaded", cert_file=str(self._tls.cert_file))
        return configuration

    def _files_identity(self) -> tuple[tuple[int, int, int], ...]:
        files = (self._tls.cert_file, self._tls.key_file, self._tls.client_ca_file)
        stats = [os.stat(path) for path in files if path is not None]
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


def _read_configuration(tls: ServerTls) -> grpc.ServerCertificateConfiguration:
    cert = _read(tls.cert_file)
    key = _read(tls.key_file)
    _check_pair(cert, key, tls)
    client_ca = _read(tls.client_ca_file) if tls.client_ca_file is not None else None
    if client_ca is not None:
        _load_certificates(client_ca, tls.client_ca_file)
    return grpc.ssl_server_certificate_configuration([(key, cert)], client_ca)


def _check_pair(cert: bytes, key: bytes, tls: ServerTls) -> None:
    leaf = _load_certificates(cert, tls.cert_file)[0]
    try:
        private_key = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"{tls.key_file}: not an unencrypted PEM private key") from exc
    if private_key.public_key() != leaf.public_key():
        raise CertificateError(f"{tls.key_file} is not the key of {tls.cert_file}")


def _load_certificates(pem: bytes, path: Path | None) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"{path}: no PEM certificate") from exc
    return certificates


def _read(path: Path | None) -> bytes:
    assert path is not None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CertificateError(f"cannot read {path}: {exc.strerror}") from exc


def channel_credentials(tls: ClientTls) -> grpc.ChannelCredentials:
    """Credentials verifying the server with ``tls.ca_file`` and presenting the client's
    certificate when set. Raises :class:`CertificateError` for a file that cannot be read."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file) if tls.ca_file is not None else None,
        private_key=_read(tls.key_file) if tls.key_file is not None else None,
        certificate_chain=_read(tls.cert_file) if tls.cert_file is not None else None,
    )


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; a wildcard (0.0.0.0, ::) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
