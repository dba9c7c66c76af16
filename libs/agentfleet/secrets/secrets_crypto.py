"""Envelope encryption of project secrets (``kb.project_secrets``).

Each value is encrypted with AES-256-GCM under its own random data key; the data key is
wrapped (RFC 3394 AES key wrap) by the operator's key-encryption key, whose id is stored
with the row. The project id and the secret's name are the associated data, so a row
copied to another project or renamed does not decrypt.

Keys come from ``AGENTFLEET_SECRETS_KEYS`` (``id:base64key,...``): the first one encrypts,
every one decrypts, so a key is rotated by putting a new one first, running
``agentfleet secrets rotate-key`` (re-wraps every data key with it), then removing the old
one. ``agentfleet up`` keeps a generated key in its data folder for the embedded default
(:func:`local_key_file`).

Errors::

    FailedPrecondition (agentfleet.errors)
    ├── SecretsKeyMissing     no key configured: nothing can be encrypted
    └── SecretUndecryptable   the row's key is gone, or the row was altered or moved
"""

from __future__ import annotations

import base64
import json
import os
import secrets as random_source
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from agentfleet.errors import FailedPrecondition

KEYS_SETTING = "AGENTFLEET_SECRETS_KEYS"
KEY_FILE_NAME = "secrets.key"
_NONCE_BYTES = 12


class SecretsKeyMissing(FailedPrecondition):
    """No key-encryption key is configured."""

    def __init__(self) -> None:
        super().__init__(
            f"no encryption key for project secrets is configured: set {KEYS_SETTING} to "
            "id:base64key (32 random bytes, e.g. `openssl rand -base64 32`)"
        )


class SecretUndecryptable(FailedPrecondition):
    """A stored secret cannot be decrypted with the configured keys."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SealedSecret:
    """A secret value as stored: nothing here reveals it without the key-encryption key."""

    ciphertext: bytes
    """AES-256-GCM ciphertext of the UTF-8 value, tag included."""
    nonce: bytes
    wrapped_key: bytes
    """The row's data key, wrapped by the key-encryption key ``key_id``."""
    key_id: str


class SecretsKeyring:
    """The operator's key-encryption keys; the first one is current (encrypts and re-wraps)."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise SecretsKeyMissing()
        self._keys = dict(keys)
        self.current_id = keys[0][0]

    def has(self, key_id: str) -> bool:
        return key_id in self._keys

    def seal(self, project_id: str, name: str, value: str) -> SealedSecret:
        """Encrypts ``value`` under a new data key wrapped by the current key."""
        data_key = AESGCM.generate_key(bit_length=256)
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = AESGCM(data_key).encrypt(
            nonce, value.encode("utf-8"), _associated_data(project_id, name)
        )
        return SealedSecret(
            ciphertext=ciphertext,
            nonce=nonce,
            wrapped_key=aes_key_wrap(self._keys[self.current_id], data_key),
            key_id=self.current_id,
        )

    def open(self, project_id: str, name: str, sealed: SealedSecret) -> str:
        """The value; :class:`SecretUndecryptable` naming the secret and the reason."""
        data_key = self._unwrap(name, sealed)
        try:
            plain = AESGCM(data_key).decrypt(
                sealed.nonce, sealed.ciphertext, _associated_data(project_id, name)
            )
        except InvalidTag:
            raise SecretUndecryptable(
                f"secret {name!r} does not decrypt for project {project_id!r}: it was altered "
                "or copied from another project or name"
            ) from None
        return plain.decode("utf-8")

    def rewrap(self, name: str, sealed: SealedSecret) -> SealedSecret:
        """The same ciphertext with its data key wrapped by the current key."""
        if sealed.key_id == self.current_id:
            return sealed
        data_key = self._unwrap(name, sealed)
        return SealedSecret(
            ciphertext=sealed.ciphertext,
            nonce=sealed.nonce,
            wrapped_key=aes_key_wrap(self._keys[self.current_id], data_key),
            key_id=self.current_id,
        )

    def _unwrap(self, name: str, sealed: SealedSecret) -> bytes:
        key = self._keys.get(sealed.key_id)
        if key is None:
            raise SecretUndecryptable(
                f"secret {name!r} is encrypted with key {sealed.key_id!r}, which {KEYS_SETTING} "
                "does not list"
            )
        try:
            return aes_key_unwrap(key, sealed.wrapped_key)
        except InvalidUnwrap:
            raise SecretUndecryptable(
                f"secret {name!r}: key {sealed.key_id!r} does not unwrap its data key (a "
                "different key under the same id?)"
            ) from None


def keyring_from(keys: Sequence[tuple[str, bytes]]) -> SecretsKeyring | None:
    """A keyring of ``keys``, or None when there is none (secrets can then not be set)."""
    return SecretsKeyring(keys) if keys else None


def new_key_entry(key_id: str) -> str:
    """A fresh ``id:base64key`` entry for ``AGENTFLEET_SECRETS_KEYS``."""
    return f"{key_id}:{base64.b64encode(random_source.token_bytes(32)).decode('ascii')}"


def local_key_file(data_dir: Path) -> str:
    """The ``id:base64key`` entry kept in ``<data_dir>/secrets.key`` (0600), created once.

    For the embedded default of ``agentfleet up``: secrets set in one session still decrypt
    in the next. A deployment configures its own keys instead.
    """
    path = data_dir / KEY_FILE_NAME
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        # Created with 0600 from the start: never readable by others, even briefly.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(new_key_entry("local-1") + "\n")
    return path.read_text().strip()


def _associated_data(project_id: str, name: str) -> bytes:
    # Length-safe encoding: no (project, name) pair serialises like another.
    return json.dumps(["agentfleet.project_secret.v1", project_id, name]).encode("utf-8")
