"""Every environment variable agentsite reads, declared once: its name, how it is parsed, its
default, what it does and where it belongs.

``agentsite.settings`` (and the few places that read a variable outside the settings) read
through ``read(name)``, which refuses a name that is not declared here, so nothing is read that
the configuration reference does not list. The reference's tables in docs/configuration.md are
generated from this list: after changing it, run ``python -m agentsite.config`` (a test fails
while the page differs from what it would write).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import environ
from django.core.exceptions import ImproperlyConfigured

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# How a value is parsed: django-environ's parser of that name; "raw" is the text as written.
Kind = Literal["str", "bool", "int", "float", "list", "json", "db_url", "raw"]
KIND_NAMES = {"str": "text", "bool": "`0`/`1`", "int": "integer", "float": "number",
              "list": "comma-separated", "json": "JSON", "db_url": "URL", "raw": "text"}
# No default: unset is an error (ImproperlyConfigured), unless the reader passes the default,
# where it depends on other settings (the database under AGENTSITE_VAR_DIR).
REQUIRED = environ.Env.NOTSET
DECLARED = object()  # read()'s default: the one declared


def _strip(value: str) -> str:
    return value.strip()


def _strip_slash(value: str) -> str:
    return value.strip().rstrip("/")


def _upper(value: str) -> str:
    return value.upper()


def _networks(value: list[str]) -> list[str]:
    for network in value:  # a mistake stops the start, naming the entry
        try:
            ipaddress.ip_network(network.strip().strip("[]"), strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"OUTBOUND_ALLOWED_NETWORKS: {network!r} is not an IP address or "
                                       "network (write e.g. 127.0.0.1/32, 10.0.0.0/8 or ::1/128).") from exc
    return value


def _otel_content(value: str) -> str:
    value = value.strip().lower()
    if value not in ("off", "redacted", "full"):
        raise ImproperlyConfigured("AGENTSITE_OTEL_CONTENT: write off, redacted or full.")
    return value


def _hook_commands(value: Any) -> Any:
    if not isinstance(value, dict) or not all(
            isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("command"), str))
            for v in value.values()):
        raise ImproperlyConfigured('HOOK_COMMANDS: write a JSON object of name -> {"command": "...", '
                                   '"timeout_s": 5}.')
    return value


_STDIO_LIMITS = ("max_processes", "max_calls", "idle_s")


def _mcp_stdio_servers(text: str) -> Any:
    value = json.loads(text or "{}")
    if not isinstance(value, dict) or not all(
            isinstance(spec, dict) and isinstance(spec.get("command"), str) and spec["command"]
            and isinstance(spec.get("args", []), list) and isinstance(spec.get("env", {}), dict)
            and all(type(spec.get(limit, 1)) in (int, float) and spec.get(limit, 1) >= 1
                    for limit in _STDIO_LIMITS)
            for spec in value.values()):
        raise ImproperlyConfigured('MCP_STDIO_SERVERS must be a JSON object of {"key": {"command": '
                                   '"...", "args": [...], "env": {...}}}, with optional limits '
                                   '"max_processes", "max_calls" and "idle_s" (numbers, at least 1).')
    return value


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: Any
    description: str
    # The default as the reference shows it, where the value alone would not say it.
    shown: str = ""
    # Applied to the parsed value (the default included): normalises it, or raises
    # ImproperlyConfigured naming the variable and what to write.
    clean: Callable[[Any], Any] | None = None
    group: str = ""


def _group(title: str, *settings: Setting) -> list[Setting]:
    return [replace(s, group=title) for s in settings]


S = Setting  # short, for the table below
DECLARATION: list[Setting] = [
    *_group(
        "The site",
        S("DEBUG", "bool", False, "Development mode; with `DEBUG=0`, `SECRET_KEY` is required and the "
          "HTTPS settings below switch on.", shown="`0` (`manage.py dev`, `make run` and the test suite: `1`)"),
        S("SECRET_KEY", "str", REQUIRED, "The signing key for sessions and tokens.",
          shown="required with `DEBUG=0`; in development generated once into `var/secret_key`"),
        S("FIELD_ENCRYPTION_KEY", "str", "", "Fernet key(s) for secrets at rest (providers' API keys, MCP "
          "headers), comma-separated, the first encrypts: set it, or changing `SECRET_KEY` makes the "
          "stored secrets unreadable.", shown="derived from `SECRET_KEY`"),
        S("ALLOWED_HOSTS", "list", [], "The host names the site answers to (websocket Origins are checked "
          "against them).", shown="`localhost,127.0.0.1,[::1]` with `DEBUG=1`, else empty"),
        S("CSRF_TRUSTED_ORIGINS", "list", [], "Origins with their scheme, e.g. `https://agents.example.com`: "
          "a site behind a TLS proxy lists its public origin here, and websockets accept it too."),
        S("TIME_ZONE", "str", "UTC", "The server's time zone."),
        S("LOG_LEVEL", "str", "INFO", "`DEBUG`, `INFO`, `WARNING` or `ERROR`.", clean=_upper),
        S("AGENTSITE_VAR_DIR", "raw", None, "Where the embedded SQLite database, the generated secret key "
          "and other local files live.", shown="`var/` in the project"),
    ),
    *_group(
        "Database",
        S("DATABASE_URL", "db_url", REQUIRED, "Any URL django-environ understands; PostgreSQL: "
          "`postgres://user:pass@host:5432/db`.", shown="`sqlite:///var/agentsite.sqlite3`"),
        S("DATABASE_POOL_MAX", "int", 10, "PostgreSQL: the connections each process (web, worker, beat) "
          "keeps in its pool at most, a thread holding one only while it queries, so the server sees at "
          "most processes × this; `0` turns the pool off (then a connection per thread, kept "
          "`CONN_MAX_AGE` seconds: put PgBouncer in front)."),
        S("DATABASE_POOL_TIMEOUT_S", "float", 30.0, "How long a query waits for a free connection of its "
          "process's pool before it fails."),
        S("DATABASE_PREPARE_THRESHOLD", "int", 5, "PostgreSQL with the pool: a statement a connection has "
          "run this many times is prepared on the server, which then plans it once (the values are sent "
          "apart from the statement, server-side binding); `0` never prepares and sends values inside "
          "the statement, as Django does by default (for a PgBouncer in transaction mode older than "
          "1.21)."),
        S("CONN_MAX_AGE", "int", 60, "With `DATABASE_POOL_MAX=0` only: seconds a PostgreSQL connection is "
          "reused."),
        S("DATABASE_STEPS_WAIT_FOR_DISK", "bool", False, "PostgreSQL: whether each write of a running turn "
          "(its claim, steps, costs) waits for the server to flush it to disk as it commits (from 0.2 ms on "
          "an idle local disk to several ms on a busy or network one). Off, they commit at once and the server flushes them within a fraction of a "
          "second; the turn's end always waits, and with it every step before it. A crash of the database "
          "server (not of a worker) may then lose a running turn's last steps, which it is resumed without, "
          "as after a lost worker, and an API turn's start is flushed with its end. What a person sent in the chat is always on disk before it is accepted."),
    ),
    *_group(
        "Redis and workers",
        S("REDIS_URL", "str", "", "The Celery broker, channel layer and signals, e.g. "
          "`redis://127.0.0.1:6379/0`.", shown="unset: the embedded server"),
        S("EMBEDDED_REDIS_PORT", "int", 6390, "The port of the embedded Redis that `manage.py dev` starts "
          "when `REDIS_URL` is unset."),
        S("CHANNEL_LAYER_CAPACITY", "int", 1500, "Messages buffered per channel before the layer drops "
          "them (pages re-sync from the database)."),
        S("CHANNEL_LAYER_SEND_TIMEOUT_S", "float", 1.0, "How long a live announcement waits for Redis: a "
          "Redis that hangs makes it drop the announcement (pages re-sync from the database) and, at a "
          "second timeout within 5 s, skip Redis for the next 5 s, instead of holding a send or a turn."),
        S("CHANNEL_LAYER_IN_MEMORY", "bool", False, "`1`: live updates go through an in-process channel "
          "layer instead of Redis (one process only: tests)."),
        S("CELERY_WORKER_POOL", "str", "threads", "The worker's pool: threads carry many turns that wait "
          "on model APIs in one process."),
        S("CELERY_WORKER_CONCURRENCY", "int", 50, "Threads per worker process (turns mostly wait on model "
          "APIs)."),
        S("CELERY_VISIBILITY_TIMEOUT", "int", 3900, "Seconds before Redis redelivers an unacknowledged "
          "task; above the longest turn."),
        S("BROKER_CONNECT_TIMEOUT_S", "float", 2.0, "How long a connect to the Celery broker may take, so "
          "that a send to a Redis that is down fails within seconds."),
        S("BROKER_SOCKET_TIMEOUT_S", "float", 3.0, "How long a command on the Celery broker may take, so "
          "that a send to a Redis that hangs fails within seconds."),
        S("BROKER_RECONNECT_MAX_S", "float", 1.0, "A worker that lost Redis tries it again this often at "
          "most, and never gives up."),
    ),
    *_group(
        "Turns",
        S("TURN_HEARTBEAT_S", "float", 5.0, "How often a running turn renews its heartbeat."),
        S("TURN_STALE_AFTER_S", "float", 30.0, "A running turn whose heartbeat is older than this is taken "
          "back by the reaper (its thread hangs)."),
        S("TURN_WORKER_BEAT_S", "float", 1.0, "How often every worker process says it is alive (a "
          "`TurnWorker` row)."),
        S("TURN_WORKER_DEAD_AFTER_S", "float", 4.0, "A worker process silent this long is dead: its "
          "running turns are resumed elsewhere."),
        S("TURN_REAPER_INTERVAL_S", "float", 2.0, "How often every worker process runs the reaper."),
        S("TURN_BEAT_REAP_S", "float", 15.0, "How often beat runs the reaper too, as a backstop."),
        S("TURN_CANCEL_POLL_S", "float", 0.2, "How often a worker checks its turns' stop signals in "
          "Redis."),
        S("TURN_MAX_RESUMES", "int", 3, "A turn whose worker died under it is resumed from its last "
          "recorded step at most this many times, then ends interrupted and asks the person to send "
          "again (a worker shutting down or a dropped database connection does not count)."),
        S("TURN_MAX_ATTEMPTS", "int", 30, "Attempts at one turn in all, whatever handed it back."),
        S("TURN_SHUTDOWN", "str", "handoff", "What a worker told to stop (SIGTERM) does with its running "
          "turns: `handoff` gives them back at once to be continued by another worker, `wait` finishes "
          "them first, up to their time limit (`manage.py dev`; see [Stopping and restarting workers]"
          "(deployment.md#stopping-and-restarting-workers))."),
        S("MODEL_STREAM_IDLE_TIMEOUT_S", "float", 30.0, "A model's answer that has started streaming and "
          "then sends nothing for this long (at most a quarter of the agent's step timeout) has stalled: "
          "it is retried and failed over like a stream that was cut."),
        S("COMPACTION_WINDOW_FRACTION", "float", 0.5, "An agent's history is compacted once it is "
          "estimated at this fraction of the model's context window (or at the agent's own threshold, "
          "if lower)."),
    ),
    *_group(
        "Uploads",
        S("UPLOADS_PER_MINUTE", "int", 20, "Image uploads per person per minute."),
        S("UPLOAD_CONVERSATION_MAX_MB", "int", 100, "Megabytes of images kept per conversation."),
        S("UPLOAD_TEAM_MAX_MB", "int", 2048, "Megabytes of images kept per team."),
        S("UPLOAD_MAX_PIXELS", "int", 40_000_000, "Pixels per image, read from its header (a "
          "decompression bomb is refused)."),
    ),
    *_group(
        "Accounts and sign-in",
        S("OPEN_SIGNUP", "bool", False, "Let anyone create an account (and a team of their own); "
          "otherwise people join by invitation."),
        S("INVITATION_TTL_HOURS", "int", 72, "How long an invitation link works."),
        S("EMAIL_URL", "str", "", "An e-mail backend, e.g. `smtp+tls://user:password@smtp.example.com:587`;"
          " when set, the sign-in page offers \"Forgot your password?\" (reset by e-mail).", shown="unset"),
        S("DEFAULT_FROM_EMAIL", "str", "agentsite <noreply@localhost>", "The sender of the site's e-mails "
          "(password resets)."),
        S("PASSWORD_RESET_TIMEOUT", "int", 3600, "Seconds a password-reset link stays valid."),
        S("AXES_FAILURE_LIMIT", "int", 5, "Failed sign-ins after which an account is locked out (others at "
          "the same address are not); the site operator unlocks early: admin → Access attempts as a "
          "superuser, or `manage.py axes_reset_username <name>`."),
        S("AXES_COOLOFF_MINUTES", "int", 15, "How long a locked-out account stays locked."),
        S("TRUSTED_PROXIES", "int", 0, "How many reverse proxies stand in front of the web processes, each "
          "appending the address it was reached from to `X-Forwarded-For` (nginx: `proxy_set_header "
          "X-Forwarded-For $proxy_add_x_forwarded_for;`): sign-in attempts are counted for the address "
          "that many entries from its right; `0`: the connection's own address, the header ignored "
          "(anyone can write it)."),
    ),
    *_group(
        "Security and static files",
        S("SECURE_SSL_REDIRECT", "bool", True, "With `DEBUG=0`: redirect plain HTTP to HTTPS."),
        S("SECURE_HSTS_SECONDS", "int", 31536000, "With `DEBUG=0`: how long browsers remember to use "
          "HTTPS only (HSTS).", shown="one year"),
        S("SECURE_HSTS_PRELOAD", "bool", True, "With `DEBUG=0`: ask browsers to preload the HSTS policy."),
        S("CONTENT_SECURITY_POLICY", "str", "default-src 'self'; script-src 'self'; style-src 'self'; "
          "img-src 'self' data:; font-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
          "base-uri 'self'; form-action 'self'; object-src 'none'",
          "The CSP header sent with every page: scripts and styles from this origin only, images from "
          "here or data: URIs (remote images in model output are never loaded).", shown="self-only"),
        S("STATIC_ROOT", "str", REQUIRED, "Where `collectstatic` writes for production.",
          shown="`var/staticfiles`", clean=Path),
    ),
    *_group(
        "Outbound requests, hooks and MCP",
        S("OUTBOUND_ALLOWED_NETWORKS", "list", [], "Networks the server may reach although the "
          "[outbound-network policy](security.md#outbound-network-policy) refuses internal "
          "addresses, e.g. `127.0.0.1/32,10.0.0.0/8` for an Ollama on this host and an internal API.",
          shown="empty (`manage.py dev`: `127.0.0.0/8,::1/128`)", clean=_networks),
        S("HOOK_COMMANDS", "json", {}, "The commands team admins may pick as hooks, e.g. "
          "`{\"audit\": {\"command\": \"/usr/local/bin/audit-hook\", \"timeout_s\": 5}}`, each run "
          "through `sh -lc` with the event's JSON on stdin: exit 0 allows, 2 denies (stdout the "
          "reason), any other code only warns ([Hooks](tools.md#hooks)).", clean=_hook_commands),
        S("MCP_STDIO_SERVERS", "str", "", "The MCP servers the worker may start as processes, which team "
          "admins pick by name ([MCP servers](tools.md#mcp-servers)); `\"python\"` as a command is the "
          "interpreter agentsite runs on. Each process keeps a server it started for the next turns: "
          "optional `max_processes` (4: at most this many of it at once, one per team), `max_calls` (8: "
          "calls in flight on one) and `idle_s` (300: stopped after this long without a call).", shown="empty (`manage.py dev`: the reference time server as "
          "`time`)", clean=_mcp_stdio_servers),
    ),
    *_group(
        "OpenTelemetry",
        S("OTEL_SDK_DISABLED", "bool", False, "`1` turns the OpenTelemetry export off for the whole site, "
          "teams' own exporters included."),
        S("OTEL_EXPORTER_OTLP_ENDPOINT", "str", "", "The base URL of the site's default [OpenTelemetry "
          "exporter](opentelemetry.md#traces-to-your-observability-stack-opentelemetry), for teams "
          "without their own (`/v1/traces` is added).", clean=_strip_slash),
        S("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "str", "", "The full traces URL of the default exporter, "
          "instead of `OTEL_EXPORTER_OTLP_ENDPOINT`.", clean=_strip),
        S("OTEL_EXPORTER_OTLP_HEADERS", "str", "", "The default exporter's headers as `k=v,k2=v2` (values "
          "URL-encoded)."),
        S("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "str", "", "Its headers for traces, instead of "
          "`OTEL_EXPORTER_OTLP_HEADERS`."),
        S("OTEL_SERVICE_NAME", "str", "agentsite", "The service name of the spans."),
        S("AGENTSITE_OTEL_CONTENT", "str", "off", "What the default exporter's spans carry of prompts, "
          "answers, tool arguments and results: `off`, `redacted` or `full`.", clean=_otel_content),
        S("AGENTSITE_OTEL_QUEUE_SIZE", "int", 4096, "Steps waiting to be sent, per process, before new "
          "ones are dropped (and counted; an ended turn's are sent again from the database)."),
        S("AGENTSITE_OTEL_DELAY_MS", "int", 500, "The wait between two batches of spans."),
        S("AGENTSITE_OTEL_TIMEOUT_S", "float", 10.0, "How long one send of spans may take, retries with "
          "backoff included."),
        S("AGENTSITE_OTEL_BACKLOG_MAX", "int", 10000, "Ended turns a team's receiver may owe (it was down, "
          "or refused them) before the oldest are given up: they are sent again from the database, every "
          "15 s while it fails less often, until it accepts them."),
        S("SITE_URL", "str", "", "The site's public address, for the trace links in exported spans "
          "(unset: the links are paths).", shown="unset (`make run`: its own address)",
          clean=_strip_slash),
    ),
    *_group(
        "The demo and the development runner",
        S("DEMO_PASSWORD", "raw", None, "The password of the `demo` owner that `seed_demo` (and `make run`)"
          " creates.", shown="random, printed once"),
        S("OPENAI_API_KEY", "raw", "", "When set, the demo team gets an OpenAI provider with this key and "
          "an agent on `gpt-4o-mini`."),
        S("ANTHROPIC_API_KEY", "raw", "", "When set, the demo team gets an Anthropic provider with this "
          "key and an agent on Claude Sonnet."),
        S("NO_COLOR", "raw", None, "Set: `manage.py dev` writes its processes' lines without colour."),
        S("FORCE_COLOR", "raw", None, "Set: `manage.py dev` colours its lines even when not on a "
          "terminal."),
    ),
]
SETTINGS = {s.name: s for s in DECLARATION}
_env = environ.Env()


def read(name: str, default: Any = DECLARED) -> Any:
    """The variable ``name`` from the environment, parsed and cleaned as declared. ``default``
    replaces the declared default where it depends on other settings. An undeclared name is a
    KeyError."""
    setting = SETTINGS[name]
    default = setting.default if default is DECLARED else default
    if setting.kind == "raw":
        value = os.environ.get(name, default)
    else:
        value = getattr(_env, setting.kind)(name, default=default)
    return setting.clean(value) if setting.clean else value


def dotenv_load(path: Path) -> None:
    """Variables from a ``.env`` file, under those the process environment already has."""
    if path.is_file():
        environ.Env.read_env(path, overwrite=False)


# -- the reference ------------------------------------------------------------------------------
BEGIN = ("<!-- The tables below are generated from agentsite/config.py: edit the declarations "
         "there, then run `python -m agentsite.config`. -->")
END = "<!-- End of the generated tables. -->"


def _shown(setting: Setting) -> str:
    value = setting.default
    if setting.shown:
        return setting.shown
    if value in (None, ""):
        return "unset"
    if value in ([], {}):
        return "empty"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def markdown() -> str:
    """The reference's tables: one section per group, one row per variable."""
    lines: list[str] = []
    for group in dict.fromkeys(s.group for s in DECLARATION):
        lines += [f"## {group}", "", "| variable | type | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{s.name}` | {KIND_NAMES[s.kind]} | {_shown(s)} | {s.description} |"
                  for s in DECLARATION if s.group == group]
        lines.append("")
    return "\n".join(lines)


def page(text: str) -> str:
    """The reference page ``text`` with its generated part rewritten from the declaration."""
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n\n{markdown()}\n{END}{tail}"


if __name__ == "__main__":
    PAGE.write_text(page(PAGE.read_text()))
