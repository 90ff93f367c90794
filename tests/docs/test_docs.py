"""The documentation stays in step with the code: the configuration reference is the page its
declaration (agentsite/config.py) writes, every variable the code reads is declared there, and
every declared one is read; every page is in the site's navigation. (``make docs`` builds the
site strictly in CI: broken links and anchors fail there.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from agents.config.seed import ENV_PROVIDERS
from agentsite.config import PAGE, SETTINGS, page

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CODE = ["agentsite", "agents", "traces", "memory", "manage.py"]
NAME = r'"([A-Z][A-Z0-9_]+)"'
# The ways the code reads a variable by name: the declaration's reader, django-environ, os.
# (Writes, ``os.environ.setdefault`` and ``{**os.environ, ...}`` for a child process, are not
# reads.)
READS = [
    rf"(?<![.\w])read\(\s*{NAME}",
    rf"(?<![.\w])env(?:\.[a-z_]+)?\(\s*{NAME}",
    rf"(?:environ\.get|getenv)\(\s*{NAME}",
    rf"environ\[\s*{NAME}\s*\](?!\s*=[^=])",
    rf"{NAME}\s+(?:not\s+)?in\s+os\.environ",
]
# Reads whose name is not written out: the demo seed's provider keys.
READ_BY_NAME_ELSEWHERE = {spec.env_var for spec in ENV_PROVIDERS}


def sources() -> dict[str, str]:
    files = [p for c in CODE for p in ([ROOT / c] if c.endswith(".py") else (ROOT / c).rglob("*.py"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in files if "migrations" not in p.parts}


def code_reads() -> dict[str, set[str]]:
    """Variable name -> the files that read it."""
    found: dict[str, set[str]] = {}
    for path, source in sources().items():
        for pattern in READS:
            for name in re.findall(pattern, source):
                found.setdefault(name, set()).add(path)
    return found


def test_the_configuration_reference_is_what_the_declaration_writes():
    text = PAGE.read_text()
    assert page(text) == text, "docs/configuration.md is stale: run `python -m agentsite.config`"


def test_every_variable_the_code_reads_is_declared():
    undeclared = {name: sorted(paths) for name, paths in code_reads().items() if name not in SETTINGS}
    assert not undeclared, f"declare these in agentsite/config.py: {undeclared}"


def test_every_declared_variable_is_read_by_the_code():
    unread = set(SETTINGS) - set(code_reads()) - READ_BY_NAME_ELSEWHERE
    assert not unread, f"agentsite/config.py declares variables nothing reads: {sorted(unread)}"


def test_the_settings_read_the_environment_only_through_the_declaration():
    source = (ROOT / "agentsite" / "settings.py").read_text()
    direct = re.findall(r"os\.environ|getenv|environ\.Env\(|\benv(?:\.\w+)?\(|read_env", source)
    assert not direct, f"agentsite/settings.py reads the environment around agentsite.config: {direct}"


def test_every_read_by_a_computed_name_is_the_seeds():
    computed = re.compile(r"(?:environ\.get\(|getenv\(|environ\[)\s*(?![\s\"'])")
    places = sorted(path for path, source in sources().items() if computed.search(source))
    assert places == ["agents/config/seed.py", "agentsite/config.py"], (
        f"a variable read by a computed name is not in the reference: {places}")
    assert READ_BY_NAME_ELSEWHERE <= set(SETTINGS)


def test_every_page_is_in_the_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav):
        for item in nav:
            for value in item.values():
                yield from pages(value) if isinstance(value, list) else [value]

    assert set(pages(config["nav"])) == {p.name for p in DOCS.glob("*.md")}
