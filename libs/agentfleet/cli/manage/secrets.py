"""``agentfleet secrets rotate-key``: re-wrap every project secret with the current key.

Straight on the database, like ``migrate`` and ``token``. Rotation: put a new key first in
``AGENTFLEET_SECRETS_KEYS`` (keeping the old ones after it), restart the toolpool, run this,
then drop the old keys. Each secret's data key is unwrapped with its own key and wrapped with
the current one (the value's ciphertext is not touched); rows written before encryption are
sealed. Idempotent: a row already on the current key is left alone, so a second run changes
nothing. Batched, one transaction per batch, so a large table never holds one long lock.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from rich.text import Text

from agentfleet.cli.render import console
from agentfleet.config import Settings
from agentfleet.config_values import parse_secrets_keys
from agentfleet.errors import FailedPrecondition
from agentfleet.postgres import db
from agentfleet.postgres.db import create_pool
from agentfleet.postgres.embedded_pg import resolve_database_url
from agentfleet.secrets.project_secrets import ProjectSecretRepository, StoredSecret
from agentfleet.secrets.secrets_crypto import (
    KEY_FILE_NAME,
    SecretsKeyMissing,
    SecretsKeyring,
    SecretUndecryptable,
)

DEFAULT_BATCH_SIZE = 200


@dataclass(kw_only=True, slots=True)
class RotationReport:
    """What one rotation did."""

    rewrapped: int = 0
    """Data keys moved from an older key to the current one."""
    sealed: int = 0
    """Plain rows (from before encryption) encrypted."""
    current: int = 0
    """Rows already on the current key (left alone)."""
    failed: list[str] = field(default_factory=list)
    """``project/name: reason`` of each row whose key is not configured or does not unwrap."""


def add_secrets_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Registers ``secrets rotate-key`` on the top-level parser."""
    parser = commands.add_parser("secrets", help="administer project secrets at rest")
    actions = parser.add_subparsers(dest="secrets_command", required=True, metavar="ACTION")
    rotate = actions.add_parser(
        "rotate-key",
        help="re-wrap every secret with the first key of AGENTFLEET_SECRETS_KEYS "
        "(and encrypt rows stored before encryption)",
    )
    rotate.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per transaction"
    )


async def run_secrets(settings: Settings, args: argparse.Namespace) -> int:
    keyring = SecretsKeyring(_keys(settings))
    database_url, embedded = await resolve_database_url(settings)
    try:
        pool = await create_pool(database_url, min_size=1, max_size=2)
        try:
            report = await rotate_key(pool, keyring, batch_size=max(1, args.batch_size))
        finally:
            await pool.close()
    finally:
        if embedded is not None:
            embedded.stop()
    console.print(
        f"current key {keyring.current_id!r}: re-wrapped {report.rewrapped}, "
        f"encrypted {report.sealed} plain, {report.current} already current, "
        f"{len(report.failed)} failed"
    )
    for failure in report.failed:
        console.print(Text.assemble(("failed", "red"), f"  {failure}"))
    return 1 if report.failed else 0


async def rotate_key(
    pool: asyncpg.Pool, keyring: SecretsKeyring, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> RotationReport:
    """Moves every secret onto ``keyring``'s current key; see the module docstring."""
    secrets = ProjectSecretRepository(pool)
    report = RotationReport()
    report.current = await secrets.count_on_key(keyring.current_id)
    after: str | None = None
    while True:
        async with db.transaction(pool) as conn:
            batch = await secrets.lock_to_rotate(conn, keyring.current_id, after, batch_size)
            for secret in batch:
                await _rotate_row(conn, keyring, secret, report)
        if len(batch) < batch_size:
            return report
        after = batch[-1].id


async def _rotate_row(
    conn: asyncpg.Connection, keyring: SecretsKeyring, secret: StoredSecret, report: RotationReport
) -> None:
    project_id, name = secret.project_id, secret.name
    if secret.sealed is None:
        sealed = keyring.seal(project_id, name, str(secret.value))
        report.sealed += 1
    else:
        try:
            sealed = keyring.rewrap(name, secret.sealed)
        except SecretUndecryptable as exc:
            report.failed.append(f"{project_id}/{name}: {exc.message}")
            return
        report.rewrapped += 1
    await ProjectSecretRepository.store_sealed(conn, secret, sealed)


def _keys(settings: Settings) -> tuple[tuple[str, bytes], ...]:
    """The configured keys, else the key ``agentfleet up`` keeps in the data folder."""
    if settings.secrets_keys:
        return settings.secrets_keys
    path: Path = settings.data_dir / KEY_FILE_NAME
    if path.exists():
        try:
            return parse_secrets_keys(path.read_text().strip())
        except ValueError as exc:
            raise FailedPrecondition(f"{path}: {exc}") from None
    raise SecretsKeyMissing()
