"""The import rules of docs/DESIGN.md ("Contracts") hold, and the check notices a violation.

The rules are import-linter contracts in pyproject.toml (libs never import services,
services never import each other, the layers inside each service, no cycle between sibling
packages); import cycles between modules are found on the same grimp graph. Each check is also
run on a copy of the tree with a deliberate violation, so a check that cannot fail fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_MODULES_AT_ONE_LEVEL = 16
"""DESIGN's "about 15" modules per folder, as a bound a test can hold."""

CYCLE_CHECK = """
import sys
import grimp

graph = grimp.build_graph("agentfleet", "services", exclude_type_checking_imports=True)
edges = {m: graph.find_modules_directly_imported_by(m) & graph.modules for m in graph.modules}
order, low, stack, on_stack, cycles = {}, {}, [], set(), []

def visit(module):
    order[module] = low[module] = len(order)
    stack.append(module)
    on_stack.add(module)
    for other in edges[module]:
        if other not in order:
            visit(other)
            low[module] = min(low[module], low[other])
        elif other in on_stack:
            low[module] = min(low[module], order[other])
    if low[module] == order[module]:
        component = []
        while True:
            other = stack.pop()
            on_stack.discard(other)
            component.append(other)
            if other == module:
                break
        if len(component) > 1:
            cycles.append(sorted(component))

sys.setrecursionlimit(10_000)
for module in sorted(graph.modules):
    if module not in order:
        visit(module)
print("\\n".join(" <-> ".join(c) for c in cycles))
sys.exit(1 if cycles else 0)
"""


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": f"{tree / 'libs'}{os.pathsep}{tree}"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _module_cycles(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CYCLE_CHECK],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": f"{tree / 'libs'}{os.pathsep}{tree}"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def violating_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the code with one violation of each kind."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "libs" / "agentfleet", tree / "libs" / "agentfleet", ignore=ignore)
    shutil.copytree(ROOT / "services", tree / "services", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")

    def append(relative: str, line: str) -> None:
        path = tree / relative
        path.write_text(path.read_text() + f"\n{line}\n")

    append("libs/agentfleet/timestamps.py", "import services.history.models  # noqa")
    append("services/history/queries.py", "import services.dispatcher.models  # noqa")
    append("services/executor/store/runs.py", "import services.executor.run_path.loop  # noqa")
    append("services/dispatcher/models.py", "import services.dispatcher.server  # noqa")
    (tree / "libs/agentfleet/cycle_a.py").write_text("import agentfleet.cycle_b  # noqa\n")
    (tree / "libs/agentfleet/cycle_b.py").write_text("import agentfleet.cycle_a  # noqa\n")
    return tree


def test_the_import_rules_hold() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_module_is_in_an_import_cycle() -> None:
    result = _module_cycles(ROOT)
    assert result.returncode == 0, f"import cycles:\n{result.stdout}{result.stderr}"


def test_a_deliberate_violation_of_each_rule_fails_the_check(violating_tree: Path) -> None:
    result = _lint_imports(violating_tree)
    assert result.returncode != 0
    broken = result.stdout
    for contract in (
        "The library never imports a service BROKEN",
        "Services never import each other BROKEN",
        "Executor: the store uses the service's values and the library, never the logic",
        "Dispatcher: servicer above the domain above the store BROKEN",
    ):
        assert contract in " ".join(broken.split()), broken
    assert "agentfleet.timestamps -> services.history.models" in broken


def test_a_deliberate_cycle_is_found(violating_tree: Path) -> None:
    result = _module_cycles(violating_tree)
    assert result.returncode == 1
    assert "agentfleet.cycle_a <-> agentfleet.cycle_b" in result.stdout


def test_no_folder_is_a_long_shelf() -> None:
    shelves = {}
    for folder in [ROOT / "libs" / "agentfleet", *(ROOT / "services").iterdir()]:
        for package in [folder, *folder.rglob("*")]:
            if not package.is_dir() or package.name in {"__pycache__", "v1"}:
                continue
            modules = [p for p in package.glob("*.py") if p.stem not in {"__init__", "__main__"}]
            if len(modules) > MAX_MODULES_AT_ONE_LEVEL:
                shelves[str(package.relative_to(ROOT))] = len(modules)
    assert not shelves, f"folders with more than {MAX_MODULES_AT_ONE_LEVEL} modules: {shelves}"


def test_every_package_says_what_it_holds() -> None:
    silent = []
    for init in [
        *(ROOT / "libs" / "agentfleet").rglob("__init__.py"),
        *(ROOT / "services").rglob("__init__.py"),
    ]:
        if "v1" in init.parts:
            continue
        text = init.read_text().lstrip()
        if not text.startswith('"""') or "TODO" in text.split('"""')[1]:
            silent.append(str(init.relative_to(ROOT)))
    assert not silent, f"packages without a docstring: {silent}"
