"""The documentation stays in step with the code: every setting the code reads from the
environment has its row in the configuration reference, and every row names one the code
reads; every page is in the site's navigation. (``make docs`` builds the site strictly in CI:
broken links and anchors fail there.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Read outside agentsite/settings.py: the demo's password (manage.py dev, the seed).
READ_ELSEWHERE = {"DEMO_PASSWORD"}


def settings_read() -> set[str]:
    source = (ROOT / "agentsite" / "settings.py").read_text()
    return (set(re.findall(r'env(?:\.\w+)?\(\s*"([A-Z][A-Z0-9_]+)"', source))
            | set(re.findall(r'(?:environ\.get|getenv)\(\s*"([A-Z][A-Z0-9_]+)"', source)))


def documented() -> set[str]:
    rows = [line for line in (DOCS / "configuration.md").read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split(" | ")[0])}


def test_every_setting_the_code_reads_is_in_the_configuration_reference():
    missing = settings_read() - documented()
    assert not missing, f"add a row to docs/configuration.md for: {sorted(missing)}"


def test_every_setting_in_the_reference_is_read_by_the_code():
    unknown = documented() - settings_read() - READ_ELSEWHERE
    assert not unknown, f"docs/configuration.md documents settings nothing reads: {sorted(unknown)}"


def test_every_page_is_in_the_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav):
        for item in nav:
            for value in item.values():
                yield from pages(value) if isinstance(value, list) else [value]

    assert set(pages(config["nav"])) == {p.name for p in DOCS.glob("*.md")}
