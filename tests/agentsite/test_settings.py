"""Settings are read once, at import, from the environment: each case runs in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DUMP = """
import json, django
from django.conf import settings
django.setup()
db = settings.DATABASES["default"]
print(json.dumps({
    "debug": settings.DEBUG,
    "engine": db["ENGINE"], "name": str(db["NAME"]), "host": db.get("HOST", ""), "user": db.get("USER", ""),
    "options": {k: str(v) for k, v in db.get("OPTIONS", {}).items()},
    "redis": settings.REDIS_URL, "embedded": settings.REDIS_IS_EMBEDDED,
    "broker": settings.CELERY_BROKER_URL,
    "layer_hosts": settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"],
    "capacity": settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"],
    "secret": settings.SECRET_KEY,
    "hosts": settings.ALLOWED_HOSTS, "csrf": settings.CSRF_TRUSTED_ORIGINS,
    "log_level": settings.LOG_LEVEL,
    "acks_late": settings.CELERY_TASK_ACKS_LATE, "reject": settings.CELERY_TASK_REJECT_ON_WORKER_LOST,
    "serializer": settings.CELERY_TASK_SERIALIZER, "accept": settings.CELERY_ACCEPT_CONTENT,
}))
"""

CLEAN = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "LOG_LEVEL", "EMBEDDED_REDIS_PORT")


def run_settings(tmp_path: Path, code: str = DUMP, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in CLEAN}
    base.update({"DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_VAR_DIR": str(tmp_path / "var")})
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60)  # noqa: S603


def settings_in(tmp_path: Path, **env: str) -> dict:
    result = run_settings(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_debug_is_off_unless_the_environment_turns_it_on(tmp_path):
    # Without DEBUG there is no development fallback: a production start needs its SECRET_KEY.
    result = run_settings(tmp_path)
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr
    s = settings_in(tmp_path, SECRET_KEY="x" * 60, ALLOWED_HOSTS="agents.example.com")
    assert s["debug"] is False


def test_manage_py_dev_turns_debug_on(tmp_path):
    code = ("import os, sys; sys.argv = ['manage.py', 'dev']; import runpy; "
            "mod = runpy.run_path('manage.py', run_name='not_main'); "
            "import unittest.mock as m\n"
            "with m.patch('django.core.management.execute_from_command_line'):\n"
            "    mod['main']()\n"
            "print(os.environ['DEBUG'])")
    result = run_settings(tmp_path, code=code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_defaults_are_the_embedded_setup(tmp_path):
    s = settings_in(tmp_path, DEBUG="1")
    assert s["debug"] is True
    assert s["engine"] == "agentsite.db.sqlite3"  # Django's, with one writer per process
    assert s["name"] == str(tmp_path / "var" / "agentsite.sqlite3")
    # SQLite tuned for a web process and worker threads writing at once.
    assert "journal_mode=WAL" in s["options"]["init_command"]
    assert s["options"]["transaction_mode"] == "IMMEDIATE"
    assert s["redis"] == "redis://127.0.0.1:6390/0"
    assert s["embedded"] is True
    assert s["broker"] == s["redis"] and s["layer_hosts"] == [s["redis"]]
    assert s["capacity"] >= 1000
    assert s["acks_late"] is True and s["reject"] is True
    assert s["serializer"] == "json" and s["accept"] == ["json"]


def test_dev_secret_key_is_generated_once_and_kept_private(tmp_path):
    first = settings_in(tmp_path, DEBUG="1")["secret"]
    second = settings_in(tmp_path, DEBUG="1")["secret"]
    assert first == second and len(first) >= 50
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.read_text().strip() == first
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"


def test_environment_overrides(tmp_path):
    s = settings_in(
        tmp_path,
        DATABASE_URL="postgres://agent:pw@db.internal:5433/agentsite",
        REDIS_URL="redis://cache.internal:6379/2",
        ALLOWED_HOSTS="agents.example.com,.example.org",
        CSRF_TRUSTED_ORIGINS="https://agents.example.com",
        SECRET_KEY="x" * 60,
        LOG_LEVEL="debug",
    )
    assert s["engine"] == "agentsite.db.postgresql"  # Django's, with the site's pool check
    assert (s["host"], s["user"], s["name"]) == ("db.internal", "agent", "agentsite")
    assert s["redis"] == "redis://cache.internal:6379/2" and s["embedded"] is False
    assert s["broker"] == s["redis"] and s["layer_hosts"] == [s["redis"]]
    assert s["hosts"] == ["agents.example.com", ".example.org"]
    assert s["csrf"] == ["https://agents.example.com"]
    assert s["secret"] == "x" * 60
    assert s["log_level"] == "DEBUG"
    assert not (tmp_path / "var" / "secret_key").exists()


def test_production_requires_a_secret_key(tmp_path):
    result = run_settings(tmp_path, DEBUG="0", ALLOWED_HOSTS="agents.example.com")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.slow
def test_check_deploy_is_clean_with_production_values(tmp_path):
    code = "import sys\nfrom django.core.management import execute_from_command_line\nexecute_from_command_line(['manage.py', 'check', '--deploy', '--fail-level', 'WARNING'])"
    result = run_settings(
        tmp_path,
        code=code,
        DEBUG="0",
        SECRET_KEY="k3y-" + "a1B2c3D4e5F6g7H8" * 4,
        ALLOWED_HOSTS="agents.example.com",
        CSRF_TRUSTED_ORIGINS="https://agents.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'prod.sqlite3'}",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
