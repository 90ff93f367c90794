"""The script that prepares and starts the llama.cpp server: what it does where it cannot build,
and where it keeps its cache. (Building and serving themselves are exercised by
``make test-llm``.)"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT
from tests.llm import server


def run_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.llm.server", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_without_a_compiler_the_command_still_runs_told_why_the_live_tests_skip(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != server.URL_ENV}
    env.update(AGENTSITE_CACHE_DIR=str(tmp_path / "cache"), CXX="no-such-compiler++")
    printed = ("import os; print(os.environ.get('AGENTSITE_LIVE_LLM_UNAVAILABLE'), "
               "os.environ.get('AGENTSITE_LIVE_LLM_URL'))")

    done = run_script("run", "--", sys.executable, "-c", printed, env=env)

    assert done.returncode == 0, done.stderr
    assert "no C/C++ compiler (no-such-compiler++ not found" in done.stdout
    assert done.stdout.rstrip().endswith("None")  # no server was started
    assert "the live LLM tests will skip" in done.stderr
    assert not (tmp_path / "cache" / server.venv_dir(tmp_path).name).exists()


def test_the_command_fails_as_the_command_fails(tmp_path):
    env = {**os.environ, server.URL_ENV: "http://127.0.0.1:9/v1"}

    done = run_script("run", "--", sys.executable, "-c", "raise SystemExit(3)", env=env)

    assert done.returncode == 3
    assert "using the server at http://127.0.0.1:9/v1" in done.stderr


def test_the_cache_is_outside_the_clone_and_keyed_on_both_versions(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTSITE_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    cache = server.cache_dir()
    assert cache == tmp_path / ".cache" / "agentsite"
    assert ROOT not in cache.parents
    major, minor = sys.version_info[:2]
    assert server.venv_dir(cache).name == f"llama-cpp-python-{server.LLAMA_CPP_PYTHON}-py{major}.{minor}"
    monkeypatch.setenv("AGENTSITE_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert server.cache_dir() == tmp_path / "elsewhere"
