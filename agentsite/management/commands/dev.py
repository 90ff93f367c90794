from __future__ import annotations

import importlib.util
import io
import json
import os

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from agents.config.seed import demo_seed
from agents.turns.selectors import running_turns_time_left
from agentsite.config import read
from agentsite.devrunner import DevOptions, DevRunner, dev_worker_prefix
from agentsite.processes import Printer

# What ``manage.py dev`` allows unless OUTBOUND_ALLOWED_NETWORKS is set: loopback only.
DEV_ALLOWED_NETWORKS = "127.0.0.0/8,::1/128"
# The stdio MCP server ``manage.py dev`` offers unless MCP_STDIO_SERVERS is set: the reference
# time server (installed with agentsite), so a team admin can add it as "time" at once.
DEV_MCP_STDIO_SERVERS = {"time": {"command": "python",
                                  "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}


class Command(BaseCommand):
    help = (
        "Run everything for development: the embedded Redis (when REDIS_URL is unset), "
        "migrations and the demo seed, daphne and a Celery worker. Ctrl-C stops it all, letting "
        "running turns finish; a second Ctrl-C stops at once."
    )
    requires_system_checks = []  # checks run in the web process

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address for the web server (default 127.0.0.1).")
        parser.add_argument("--port", type=int, default=8000, help="Port for the web server (default 8000).")
        parser.add_argument("--no-worker", action="store_true", help="Do not start a Celery worker.")
        parser.add_argument("--health-timeout", type=float, default=90.0, help="Seconds to wait for /healthz.")

    def handle(self, *args, **options) -> None:
        printer = Printer(self.stdout._out)
        if "OUTBOUND_ALLOWED_NETWORKS" not in os.environ:
            # Development: model servers on this machine (Ollama, llama.cpp, vLLM) are reachable.
            # The processes started below inherit it.
            os.environ["OUTBOUND_ALLOWED_NETWORKS"] = DEV_ALLOWED_NETWORKS
            settings.OUTBOUND_ALLOWED_NETWORKS = DEV_ALLOWED_NETWORKS.split(",")
            printer.line("setup", f"Outbound requests may reach this machine ({DEV_ALLOWED_NETWORKS}): "
                                  "a development default; set OUTBOUND_ALLOWED_NETWORKS to choose.")
        if "MCP_STDIO_SERVERS" not in os.environ and importlib.util.find_spec("mcp_server_time"):
            os.environ["MCP_STDIO_SERVERS"] = json.dumps(DEV_MCP_STDIO_SERVERS)
            settings.MCP_STDIO_SERVERS = DEV_MCP_STDIO_SERVERS
            printer.line("setup", "MCP over stdio: the operator server \"time\" (mcp-server-time) "
                                  "can be added by team admins; set MCP_STDIO_SERVERS to choose.")
        if not os.environ.get("SITE_URL"):
            # Links in exported spans (agentsite.trace.url) point at this server.
            wildcard = options["host"] in ("0.0.0.0", "::")  # noqa: S104 - read, not bound
            host = "127.0.0.1" if wildcard else options["host"]
            host = f"[{host}]" if ":" in host else host
            os.environ["SITE_URL"] = settings.SITE_URL = f"http://{host}:{options['port']}"
        runner = DevRunner(
            DevOptions(
                host=options["host"],
                port=options["port"],
                redis_port=settings.EMBEDDED_REDIS_PORT,
                embedded_redis=settings.REDIS_IS_EMBEDDED,
                worker=not options["no_worker"],
                base_dir=settings.BASE_DIR,
                var_dir=settings.VAR_DIR,
                log_level=settings.LOG_LEVEL,
                health_timeout=options["health_timeout"],
            ),
            prepare=self.prepare,
            printer=printer,
            running_turns=self.running_turns,
        )
        code = runner.run()
        if code:
            raise SystemExit(code)

    @staticmethod
    def running_turns() -> tuple[int, float]:
        """The turns this runner's worker runs, and the most seconds one may still take."""
        try:
            return running_turns_time_left(worker_prefix=dev_worker_prefix())
        finally:
            connections.close_all()

    def prepare(self, printer: Printer) -> list[str]:
        """Migrate and seed; returns the login lines for the banner."""
        out = io.StringIO()
        call_command("migrate", interactive=False, verbosity=1, stdout=out)
        for line in out.getvalue().splitlines():
            if line.strip() and not line.startswith("  No migrations"):
                printer.line("setup", line)
        result = demo_seed()
        connections.close_all()
        if result.password:
            login = f"Log in as {result.username} / {result.password}"
            chosen = bool(read("DEMO_PASSWORD"))
            note = "" if chosen else "(shown only now; set DEMO_PASSWORD to choose your own)"
        else:
            login = f"Log in as {result.username} with the password shown at the first start"
            note = f"(forgot it? `manage.py changepassword {result.username}` or set DEMO_PASSWORD)"
        export = (f"Turns are exported as OpenTelemetry spans to {settings.OTEL_EXPORT_ENDPOINT} "
                  f"(content: {settings.OTEL_EXPORT_CONTENT})"
                  if settings.OTEL_EXPORT_ENDPOINT and not settings.OTEL_SDK_DISABLED else "")
        return [line for line in (login, note, export) if line]
