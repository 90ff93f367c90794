"""What may import what (LAYOUT.md) is a contract: the import-linter contracts in
pyproject.toml hold for the code as it is, and they do catch an import that breaks one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True,  # noqa: S603
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def lint_imports_installed() -> None:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"lint-imports is not installed beside {sys.executable}: install the dev extra")


def test_every_import_contract_is_kept(lint_imports_installed):
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("agents/turns/announce.py", "from agents.chat import live", "The rooms of agents import only downwards"),
    ("traces/record/live.py", "from traces.inspector import views", "The rooms of traces import only downwards"),
    ("traces/record/selectors.py", "from traces.costs import budgets", "The rooms of traces import only downwards"),
    ("traces/costs/views.py", "from traces.debug import compare", "The rooms of traces import only downwards"),
    # traces.models is a package: its modules are the bottom layer too.
    ("traces/models/costs.py", "from traces.costs import pricing", "The rooms of traces import only downwards"),
    ("traces/record/live.py", "from agents.models import Conversation", "traces imports nothing of agents"),
    ("agents/runtime/scrub.py", "import django", "The runtime is plain async Python"),
    ("agentsite/health.py", "from traces.models import Trace", "The platform (agentsite) imports no app"),
])
def test_an_upward_import_breaks_its_contract(lint_imports_installed, tmp_path, module, line, contract):
    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".venv", "var", "node_modules", ".git", "tests", "static", "*.pyc", "__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = lint_imports(copy)
    assert done.returncode != 0
    broken = [row for row in done.stdout.splitlines() if " BROKEN" in row]
    assert any(row.startswith(contract) for row in broken), done.stdout[-3000:]
