"""Importing this module starts an embedded Redis for the benchmark's process and points
``REDIS_URL`` at it (unless one is set): import it before Django reads its settings. The server
stops when the process exits (``stop()``, for a process that leaves with ``os._exit``), and its
data directory is removed."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from agentsite.processes import EmbeddedRedis, Printer, free_port

REDIS: EmbeddedRedis | None = None
DATA_DIR: Path | None = None


def stop() -> None:
    """Stop the server and remove its data directory (once; also at exit)."""
    if REDIS is not None and DATA_DIR is not None and DATA_DIR.exists():
        REDIS.stop(timeout=5)
        shutil.rmtree(DATA_DIR, ignore_errors=True)


if not os.environ.get("REDIS_URL"):
    DATA_DIR = Path(tempfile.mkdtemp(prefix="agentsite-bench-redis-"))
    REDIS = EmbeddedRedis(port=free_port(), data_dir=DATA_DIR)
    REDIS.start(Printer(open(os.devnull, "w"), color=False))  # noqa: SIM115 - the server's output
    REDIS.wait_ready()
    os.environ["REDIS_URL"] = REDIS.url
    atexit.register(stop)
