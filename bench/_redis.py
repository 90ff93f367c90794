"""Importing this module starts an embedded Redis for the benchmark's process and points
``REDIS_URL`` at it (unless one is set): import it before Django reads its settings. The server
stops when the process exits."""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

from agentsite.devrunner import EmbeddedRedis, Printer, free_port

REDIS: EmbeddedRedis | None = None
if not os.environ.get("REDIS_URL"):
    REDIS = EmbeddedRedis(port=free_port(), data_dir=Path(tempfile.mkdtemp(prefix="agentsite-bench-redis-")))
    REDIS.start(Printer(open(os.devnull, "w"), color=False))  # noqa: SIM115 - the server's output
    REDIS.wait_ready()
    os.environ["REDIS_URL"] = REDIS.url
    atexit.register(REDIS.stop, timeout=5)
