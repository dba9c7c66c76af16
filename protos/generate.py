"""Generate the Python protobuf and gRPC code of agentfleet (`make proto`).

Compiles every ``protos/agentfleet/v1/*.proto`` with ``grpc_tools.protoc`` into
``<out>/agentfleet/v1/`` (``*_pb2.py``, ``*_pb2.pyi``, ``*_pb2_grpc.py``) plus an
``__init__.py``, so generated modules import each other as ``from agentfleet.v1 import
common_pb2``. ``<out>`` defaults to ``libs/``; the result there is committed and a unit test
fails when it is stale. Output depends only on the proto files and the pinned
grpcio-tools/protobuf versions, so regenerating is byte-for-byte reproducible.

Usage: ``python protos/generate.py [--out DIR]``
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
PACKAGE_DIR = Path("agentfleet") / "v1"
DEFAULT_OUT = REPO_ROOT / "libs"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
INIT_TEXT = (
    '"""Generated protobuf and gRPC code for agentfleet.v1 (`make proto`). Do not edit."""\n'
)


def proto_files() -> list[str]:
    """Paths of the package's .proto files relative to PROTO_ROOT, sorted."""
    return sorted(
        p.relative_to(PROTO_ROOT).as_posix() for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
    )


def remove_stale(package_out: Path) -> None:
    """Delete previously generated files, so a removed .proto leaves nothing behind."""
    for path in package_out.iterdir():
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES):
            path.unlink()


def generate(out: Path) -> list[Path]:
    """Generate code for every proto into ``out/agentfleet/v1``; return the files written."""
    package_out = out / PACKAGE_DIR
    package_out.mkdir(parents=True, exist_ok=True)
    remove_stale(package_out)
    well_known = resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *proto_files(),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the errors above")
    (package_out / "__init__.py").write_text(INIT_TEXT, encoding="utf-8")
    return sorted(p for p in package_out.iterdir() if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="root to write agentfleet/v1/ under (default: libs/)",
    )
    args = parser.parse_args(argv)
    written = generate(args.out.resolve())
    print(f"generated {len(written)} files in {args.out / PACKAGE_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
