"""agentsite settings: one module, configured from the environment (12-factor).

Every variable is declared once in ``agentsite.config`` (its parser, default and meaning), read
through it, and listed in docs/configuration.md. Values come from the process environment, then
from a ``.env`` file in the project root, then from the declared defaults, which are the embedded
development setup: SQLite under ``var/``, the bundled Redis server started by ``manage.py dev``,
and a secret key generated once into ``var/secret_key``.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

import environ

from agentsite.config import dotenv_load, read

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(read("AGENTSITE_VAR_DIR") or BASE_DIR / "var")  # before .env: it is not read there
VAR_DIR.mkdir(parents=True, exist_ok=True)
dotenv_load(BASE_DIR / ".env")

# Off unless the environment turns it on; ``manage.py dev`` (``make run``) and the test suite do.
DEBUG = read("DEBUG")

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
    SECRET_KEY = read("SECRET_KEY", default="") or _dev_secret_key()
else:
    # Required in production: a missing key is a startup error, never a silent default.
    SECRET_KEY = read("SECRET_KEY")

ALLOWED_HOSTS = read("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = read("CSRF_TRUSTED_ORIGINS")

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
ASGI_APPLICATION = "agentsite.asgi.application"  # daphne serves it; there is no WSGI entry

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
# Markdown and kept fragments (agentsite.fragments), per process; Django's 300 is ~15 chats.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                      "OPTIONS": {"MAX_ENTRIES": 5000}}}

# -- database -----------------------------------------------------------------------------------
DATABASES = {
    "default": read("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'agentsite.sqlite3'}"),
}
# PostgreSQL: a pool of at most DATABASE_POOL_MAX per process, a connection given back after
# each piece of work (``agentsite.db.connection_release``): the server sees at most processes x
# DATABASE_POOL_MAX whatever the threads. DATABASE_POOL_MAX=0: a connection per thread.
DATABASE_POOL_MAX = read("DATABASE_POOL_MAX")
DATABASE_POOL_TIMEOUT_S = read("DATABASE_POOL_TIMEOUT_S")
DATABASE_PREPARE_THRESHOLD = read("DATABASE_PREPARE_THRESHOLD")
DATABASE_STEPS_WAIT_FOR_DISK = read("DATABASE_STEPS_WAIT_FOR_DISK")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL, a busy timeout and IMMEDIATE transactions taken one at a time per process
    # (agentsite.db.sqlite3): no "database is locked". The PRAGMA overrides ``timeout``: keep
    # the two equal.
    DATABASES["default"]["ENGINE"] = "agentsite.db.sqlite3"
    # Closed at each request's and turn's end into the process's idle ones (agentsite.db.sqlite3).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        "transaction_mode": "IMMEDIATE", "timeout": 20})
else:
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # lazy commits, the pool's check
        DATABASES["default"]["ENGINE"] = "agentsite.db.postgresql"
    if DATABASES["default"]["ENGINE"] == "agentsite.db.postgresql" and DATABASE_POOL_MAX > 0:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them
        # Values apart from the statement, which the server prepares once it is run often.
        if DATABASE_PREPARE_THRESHOLD > 0:
            DATABASES["default"].setdefault("OPTIONS", {}).update(
                server_side_binding=True, prepare_threshold=DATABASE_PREPARE_THRESHOLD)
        # With CONN_HEALTH_CHECKS (above) the pool replaces a dead connection as it leaves it
        # (a failover, a PgBouncer restart): its check is the site's back-end's.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": DATABASE_POOL_MAX, "timeout": DATABASE_POOL_TIMEOUT_S,
            "max_idle": 60.0,  # idle this long: closed (down to min_size)
        }
    else:
        DATABASES["default"]["CONN_MAX_AGE"] = read("CONN_MAX_AGE")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: broker, channel layer, signals -----------------------------------------------------
# Unset: the embedded server ``manage.py dev`` starts on this port (REDIS_URL for its children).
EMBEDDED_REDIS_PORT = read("EMBEDDED_REDIS_PORT")
REDIS_URL = read("REDIS_URL") or f"redis://127.0.0.1:{EMBEDDED_REDIS_PORT}/0"
REDIS_IS_EMBEDDED = not read("REDIS_URL")

CHANNEL_LAYERS = {
    "default": {
        # channels_redis's, sending to a group in one or two round trips (agentsite.channel_layer).
        "BACKEND": "agentsite.channel_layer.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            # The layer drops messages past a channel's capacity (default 100); token streams
            # are bursty. Clients re-sync from the database on a gap in any case.
            "capacity": read("CHANNEL_LAYER_CAPACITY"),
            "expiry": 60,
        },
    },
}
# agentsite.channel_layer: a hung Redis must not hold a send or a turn.
CHANNEL_LAYER_SEND_TIMEOUT_S = read("CHANNEL_LAYER_SEND_TIMEOUT_S")
if read("CHANNEL_LAYER_IN_MEMORY"):
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# -- celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
# One Redis client per channel (agentsite.celery); ``rediss://`` keeps kombu's own TLS checks.
if REDIS_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "agentsite.celery:BrokerTransport"
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
    "visibility_timeout": read("CELERY_VISIBILITY_TIMEOUT"),
    # A broker that is down or hung fails a send within seconds instead of holding a web request
    # (a turn whose task could not be sent stays queued; the reaper sends it once Redis answers).
    "socket_connect_timeout": read("BROKER_CONNECT_TIMEOUT_S"),
    "socket_timeout": read("BROKER_SOCKET_TIMEOUT_S"),
}
# A worker whose broker went away keeps trying (None: forever), every BROKER_RECONNECT_MAX_S at
# most (``agentsite.celery.Consumer``; Celery's own back-off grows to 30 s between tries).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CONSUMER = "agentsite.celery:Consumer"
BROKER_RECONNECT_MAX_S = read("BROKER_RECONNECT_MAX_S")
CELERY_TIMEZONE = "UTC"

# -- auth, teams --------------------------------------------------------------------------------
LOGIN_URL = "login"

# -- e-mail (password reset) --------------------------------------------------------------------
# EMAIL_URL (e.g. smtp+tls://user:password@smtp.example.com:587) turns on password reset by
# e-mail; without it the "Forgot your password?" link and pages do not exist.
EMAIL_URL = read("EMAIL_URL")
if EMAIL_URL:
    vars().update(environ.Env.email_url_config(EMAIL_URL))
DEFAULT_FROM_EMAIL = read("DEFAULT_FROM_EMAIL")
PASSWORD_RESET_BY_EMAIL = bool(EMAIL_URL)
PASSWORD_RESET_TIMEOUT = read("PASSWORD_RESET_TIMEOUT")

# -- sign-in throttling (django-axes) ----------------------------------------------------------
# Failed sign-ins lock out the account (from one address, or from everywhere), not the other
# people at the same address (an office, everyone behind one reverse proxy); the client's
# address is read behind TRUSTED_PROXIES (agentsite.client_address).
# The person of a request is read with their teams in one query (agentsite/auth_backend.py);
# Django's backend stays listed for sessions signed in before it.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                           "agentsite.auth_backend.MembershipBackend",
                           "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = read("AXES_FAILURE_LIMIT")
AXES_COOLOFF_MINUTES = read("AXES_COOLOFF_MINUTES")
AXES_COOLOFF_TIME = timedelta(minutes=AXES_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
TRUSTED_PROXIES = read("TRUSTED_PROXIES")
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
OPEN_SIGNUP = read("OPEN_SIGNUP")
INVITATION_TTL_HOURS = read("INVITATION_TTL_HOURS")

# -- i18n, static -------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = read("TIME_ZONE")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = read("STATIC_ROOT", default=str(VAR_DIR / "staticfiles"))
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
# Django's database sessions, read with a query compiled once per process.
SESSION_ENGINE = "agentsite.sessions"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the body's hx-headers, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = read("SECURE_SSL_REDIRECT")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = read("SECURE_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = read("SECURE_HSTS_PRELOAD")
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# -- logging ------------------------------------------------------------------------------------
LOG_LEVEL = read("LOG_LEVEL")
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

CONTENT_SECURITY_POLICY = read("CONTENT_SECURITY_POLICY")

# The outbound-network policy (agentsite.outbound) refuses loopback, private, link-local,
# metadata and other internal addresses for every URL the server fetches or posts to (model
# providers, tools, the model catalogue); networks listed here are allowed anyway.
OUTBOUND_ALLOWED_NETWORKS = read("OUTBOUND_ALLOWED_NETWORKS")

# OpenTelemetry export of turns (traces.export): the site's default exporter, for every team
# that has not set its own on the exporter page, from the standard variables. The operator's
# endpoint is trusted like the allowlist; a team's is checked by the outbound policy.
OTEL_SDK_DISABLED = read("OTEL_SDK_DISABLED")
_otel_base = read("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_EXPORT_ENDPOINT = read("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
    f"{_otel_base}/v1/traces" if _otel_base else "")
OTEL_EXPORT_HEADERS = (read("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                       or read("OTEL_EXPORTER_OTLP_HEADERS"))
OTEL_EXPORT_CONTENT = read("AGENTSITE_OTEL_CONTENT")
OTEL_SERVICE_NAME = read("OTEL_SERVICE_NAME")
OTEL_EXPORT_QUEUE_SIZE = read("AGENTSITE_OTEL_QUEUE_SIZE")
OTEL_EXPORT_DELAY_MS = read("AGENTSITE_OTEL_DELAY_MS")
OTEL_EXPORT_TIMEOUT_S = read("AGENTSITE_OTEL_TIMEOUT_S")
OTEL_EXPORT_BACKLOG_MAX = read("AGENTSITE_OTEL_BACKLOG_MAX")
# The site's address as people reach it, for links in exported spans (agentsite.trace.url).
SITE_URL = read("SITE_URL")

# Hook commands the site operator defines (agents.tools.hooks): a team admin picks one by name
# for a hook of kind "command" and never types a command.
HOOK_COMMANDS = read("HOOK_COMMANDS")

# MCP servers that run as a process of the worker (stdio). Only the operator names commands:
# a team admin picks one of these keys for a server of transport "stdio".
MCP_STDIO_SERVERS = read("MCP_STDIO_SERVERS")

# Thread pool: one worker process carries many turns that wait on model APIs.
CELERY_WORKER_POOL = read("CELERY_WORKER_POOL")
CELERY_WORKER_CONCURRENCY = read("CELERY_WORKER_CONCURRENCY")

# -- turns --------------------------------------------------------------------------------------
# The reaper ends (or re-queues) a turn whose heartbeat is stale (its thread hangs in a live
# worker) or whose worker is dead; every worker runs it, and beat too, as a backstop, so a dead
# worker's turns are picked up within dead-after + interval seconds.
TURN_HEARTBEAT_S = read("TURN_HEARTBEAT_S")
TURN_STALE_AFTER_S = read("TURN_STALE_AFTER_S")
TURN_WORKER_BEAT_S = read("TURN_WORKER_BEAT_S")
TURN_WORKER_DEAD_AFTER_S = read("TURN_WORKER_DEAD_AFTER_S")
TURN_REAPER_INTERVAL_S = read("TURN_REAPER_INTERVAL_S")
# A turn that kills its worker every time must not go round for ever.
TURN_MAX_RESUMES = read("TURN_MAX_RESUMES")
TURN_MAX_ATTEMPTS = read("TURN_MAX_ATTEMPTS")
MODEL_STREAM_IDLE_TIMEOUT_S = read("MODEL_STREAM_IDLE_TIMEOUT_S")
UPLOADS_PER_MINUTE = read("UPLOADS_PER_MINUTE")
UPLOAD_CONVERSATION_MAX_MB = read("UPLOAD_CONVERSATION_MAX_MB")
UPLOAD_TEAM_MAX_MB = read("UPLOAD_TEAM_MAX_MB")
UPLOAD_MAX_PIXELS = read("UPLOAD_MAX_PIXELS")
COMPACTION_WINDOW_FRACTION = read("COMPACTION_WINDOW_FRACTION")
# A warm shutdown (SIGTERM) in production hands running turns back; ``manage.py dev``, where no
# other worker would take them, lets them finish.
TURN_SHUTDOWN = read("TURN_SHUTDOWN")
TURN_BEAT_REAP_S = read("TURN_BEAT_REAP_S")
# The loop must see a cancel signal within 1 s.
TURN_CANCEL_POLL_S = read("TURN_CANCEL_POLL_S")

# What /healthz checks beside the database, Redis and the workers' ping: name -> a function of
# an app returning {"ok": bool, ...} (named, so that the platform imports no app).
HEALTH_CHECKS = {
    "reaper": "agents.turns.health.check_reaper",
    "workers": "agents.turns.health.check_workers",
    "turns": "agents.turns.health.check_turns",
    "beat": "agents.turns.health.check_beat",
}

# Each on the maintenance queue; one that could not start before the next is due is skipped.
CELERY_BEAT_SCHEDULE = {name: {"task": task, "schedule": every, "options": {
    "queue": "maintenance", "routing_key": "maintenance", "expires": every}} for name, task, every in (
    ("turns-reap", "agents.turns.tasks.reap", TURN_BEAT_REAP_S),
    # Ended turns their receivers have not accepted yet (traces.export.delivery).
    ("otel-catch-up", "traces.tasks.export_catch_up", 15.0))}

# Unset: derived from SECRET_KEY (agentsite.crypto).
FIELD_ENCRYPTION_KEY = read("FIELD_ENCRYPTION_KEY")
