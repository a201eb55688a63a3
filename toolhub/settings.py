"""ToolHub settings. Everything comes from the environment (django-environ); a file of
`KEY=value` lines at $TOOLHUB_ENV_FILE (default: <data dir>/toolhub.env, which `make run`
writes on a fresh machine) is read first, and real environment variables win over it."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# DATA DIRECTORY
# ------------------------------------------------------------------------------
# Everything ToolHub writes (SQLite file, environments, runtime copy, embedded broker
# queue, wheelhouse) lives here. The sandbox user must be able to traverse it (o+x), but
# not list it.
#
# Every file and directory ToolHub creates is private to the account it runs as (umask 077):
# the SQLite database and its WAL, the broker, the settings file, caches. The few things the
# sandbox user must read (environments, the runtime copy) are made readable explicitly where
# they are built (toolhub.packages.envbuild, toolhub.sandbox.launcher).
os.umask(0o077)
DATA_DIR = Path(env.str("TOOLHUB_DATA_DIR", default=str(BASE_DIR / ".data"))).resolve()
if not DATA_DIR.is_dir():
    os.makedirs(DATA_DIR, exist_ok=True)
    os.chmod(DATA_DIR, 0o711)

_env_file = Path(env.str("TOOLHUB_ENV_FILE", default=str(DATA_DIR / "toolhub.env")))
if _env_file.is_file():
    environ.Env.read_env(_env_file, overwrite=False)

# GENERAL
# ------------------------------------------------------------------------------
DEBUG = env.bool("DEBUG", default=False)
TESTING = env.bool("TOOLHUB_TESTING", default=False)
if DEBUG or TESTING:
    SECRET_KEY = env.str("SECRET_KEY", default="insecure-development-key-only-for-debug-and-tests")
else:
    try:
        SECRET_KEY = env.str("SECRET_KEY")
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off. Generate one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        ) from exc

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "toolhub.accounts",
    "toolhub.toolkits",
    "toolhub.packages",
    "toolhub.runs",
    "toolhub.agents",
    "toolhub.api",
    "toolhub.serving",
    "toolhub.usage",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    # Before anything reads the database: NUL, invalid Unicode, non-finite numbers, big bodies
    # (after the language is chosen from the cookie and Accept-Language, so refusals are translated).
    "toolhub.edge.BoundedInputMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "toolhub.accounts.middleware.UserLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "toolhub.accounts.security.SecurityHeadersMiddleware",
]

ROOT_URLCONF = "toolhub.urls"
WSGI_APPLICATION = "toolhub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# DATABASE
# ------------------------------------------------------------------------------
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'toolhub.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The web server and the embedded worker share one SQLite file: wait for locks
    # instead of failing at once.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        # Take the write lock when a transaction starts, and let readers run beside a writer,
        # so the worker and the web process do not fail each other with "database is locked".
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL;",
    )
    # A file, not memory, so a worker process started by the tests shares the test database.
    # One per test process, so parallel runs on one machine do not share it.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}
# A web process keeps its PostgreSQL connections in a pool (psycopg_pool, Django's own
# support): without one every request opens a connection of its own, about 3 ms here, as much
# as the rest of a tool call's queries. Django recommends a pool over CONN_MAX_AGE under ASGI.
# The web entry points (toolhub/asgi.py, wsgi.py) turn it on; a process that forks after
# connecting must not have one (a pool's connections and threads do not survive a fork), so
# Celery workers drop it before they start (toolhub.celery). TOOLHUB_DB_POOL=0 turns it off.
# A pooled connection is checked before each use, so a restarted server costs no error.
TOOLHUB_DB_POOL = env.bool("TOOLHUB_DB_POOL", default=False)
if TOOLHUB_DB_POOL and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Django's backend, checking each pooled connection it hands out itself: after a database
    # restart the first request gets a live connection at once (toolhub/backends/postgresql).
    DATABASES["default"]["ENGINE"] = "toolhub.backends.postgresql"
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": env.int("TOOLHUB_DB_POOL_SIZE", default=10),
        # While PostgreSQL is away a request waits this long for a connection, then fails as
        # it would without a pool (the API answers 503 or, for an accepted call, 202).
        "timeout": env.float("TOOLHUB_DB_POOL_TIMEOUT", default=3.0),
    }
# The few plain SQL statements every tool call makes (toolhub.plainsql.cursor) are prepared
# once per connection on PostgreSQL: planned anew, the worker's statement that takes the next
# invocation spent ~0.7 ms of its ~0.9 ms in PostgreSQL's parser and planner. Everything else
# Django runs stays unprepared (client-side binding never prepares). Turn it off behind a
# pooler that cannot keep prepared statements (PgBouncer's transaction mode before 1.21).
TOOLHUB_DB_PREPARED = env.bool("TOOLHUB_DB_PREPARED", default=True)
if TOOLHUB_DB_PREPARED and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Django turns psycopg's prepared statements off by default; prepared after a second run.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # SQLite gives its -wal and -shm files the database file's mode; a database created
    # before ToolHub set its umask (0644) is made private here, with whatever journal it has.
    for _suffix in ("", "-wal", "-shm", "-journal"):
        _path = Path(str(DATABASES["default"]["NAME"]) + _suffix)
        if _path.is_file() and _path.stat().st_mode & 0o077:
            os.chmod(_path, 0o600)

# AUTH
# ------------------------------------------------------------------------------
# Loads the user's profile (their remembered language) in the same query as the user.
AUTHENTICATION_BACKENDS = ["toolhub.accounts.middleware.UserLanguageBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "toolkit_list"
LOGOUT_REDIRECT_URL = "login"
# Failed-login throttling (toolhub.accounts.throttle).
TOOLHUB_LOGIN_MAX_FAILURES = env.int("TOOLHUB_LOGIN_MAX_FAILURES", default=5)
TOOLHUB_LOGIN_MAX_FAILURES_PER_IP = env.int("TOOLHUB_LOGIN_MAX_FAILURES_PER_IP", default=20)
TOOLHUB_LOGIN_WINDOW_SECONDS = env.int("TOOLHUB_LOGIN_WINDOW_SECONDS", default=900)
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# I18N
# ------------------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [
    ("en", _("English")),
    ("fr", _("French")),
    ("pl", _("Polish")),
    ("tr", _("Turkish")),
    ("zh-hans", _("Simplified Chinese")),
]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
USE_TZ = True
TIME_ZONE = "UTC"

# STATIC FILES
# ------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
os.makedirs(STATIC_ROOT, exist_ok=True)
WHITENOISE_USE_FINDERS = True

# SECURITY
# ------------------------------------------------------------------------------
# A strict Content-Security-Policy on every response (toolhub.accounts.security).
TOOLHUB_CSP = env.bool("TOOLHUB_CSP", default=True)
# Behind HTTPS (set it in production): secure cookies, HSTS, redirect plain HTTP, and trust
# the proxy's X-Forwarded-Proto.
TOOLHUB_HTTPS = env.bool("TOOLHUB_HTTPS", default=False)
if TOOLHUB_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = env.int("TOOLHUB_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# ENCRYPTION AT REST
# ------------------------------------------------------------------------------
# A comma-separated list of Fernet keys: the first encrypts, all decrypt. Checked at
# start-up by toolhub.toolkits.apps (a missing or malformed key stops ToolHub).
TOOLHUB_ENCRYPTION_KEYS = env.str("TOOLHUB_ENCRYPTION_KEYS", default="")

# CELERY
# ------------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    # A UNIX socket (`make run`'s private redis-server) is `unix:///path` to redis-py and
    # `redis+socket:///path` to kombu.
    CELERY_BROKER_URL = re.sub(r"^unix://", "redis+socket://", REDIS_URL)
else:
    # Nothing else installed (the tests without REDIS_URL): kombu's filesystem transport
    # needs no server, but a reader can see a half-written message, so `make run` starts a
    # private redis-server instead (scripts/serve.py).
    _broker_dir = DATA_DIR / "broker"
    for _folder in ("queue", "processed", "control"):
        os.makedirs(_broker_dir / _folder, exist_ok=True)
    # Messages carry invocation arguments: private, also when made before the umask.
    os.chmod(_broker_dir, 0o700)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 60 * 60
CELERY_TASK_SOFT_TIME_LIMIT = 60 * 55
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fix-up closes the worker's database connection before and after every task
# unless this is set; a new PostgreSQL connection costs a few milliseconds, more than the rest
# of a warm tool call's own queries. The worker keeps its connection for this many tasks (a
# dropped one is replaced by toolhub.dbretry).
# A new pool process warms sandboxes before it takes tasks (toolhub.celery): room for that
# before Celery gives up on it (4 s by default).
CELERY_WORKER_PROC_ALIVE_TIMEOUT = 60.0
CELERY_DB_REUSE_MAX = env.int("TOOLHUB_WORKER_DB_REUSE_TASKS", default=1000)
# Per task, by name. The reaper has a queue of its own, so it never waits behind the work
# it must reap.
# The reaper is no app's: the worker imports it by name.
CELERY_IMPORTS = ["toolhub.reaper"]
CELERY_TASK_ROUTES = {
    "toolhub.toolkits.tasks.build_revision": {"queue": "builds"},
    "toolhub.toolkits.tasks.introspect_revision": {"queue": "sandbox"},
    "toolhub.runs.tasks.run_invocation": {"queue": "sandbox"},
    "toolhub.runs.tasks.revision_tests": {"queue": "sandbox"},
    "toolhub.runs.tasks.tool_tests_run": {"queue": "sandbox"},
    "toolhub.reaper.reap_stale_work": {"queue": "maintenance"},
    "toolhub.agents.tasks.run_agent": {"queue": "sandbox"},
    "toolhub.usage.tasks.fold_usage": {"queue": "maintenance"},
}
# How often celery beat runs the reaper (toolhub.reaper).
_REAP_EVERY = env.float("TOOLHUB_REAP_EVERY_SECONDS", default=30.0)
CELERY_BEAT_SCHEDULE = {
    "reap-stale-work": {"task": "toolhub.reaper.reap_stale_work", "schedule": _REAP_EVERY},
    "fold-usage": {"task": "toolhub.usage.tasks.fold_usage", "schedule": env.float("TOOLHUB_USAGE_FOLD_EVERY_SECONDS", default=60.0)},
}

# PACKAGES AND ENVIRONMENTS
# ------------------------------------------------------------------------------
TOOLHUB_INTERPRETER = env.str("TOOLHUB_INTERPRETER", default="/usr/bin/python3.11")
TOOLHUB_ENVIRONMENTS_DIR = DATA_DIR / "environments"
TOOLHUB_INDEX_URL = env.str("TOOLHUB_INDEX_URL", default="")
TOOLHUB_EXTRA_INDEX_URLS = env.list("TOOLHUB_EXTRA_INDEX_URLS", default=[])
TOOLHUB_FIND_LINKS = env.list("TOOLHUB_FIND_LINKS", default=[])
TOOLHUB_NO_INDEX = env.bool("TOOLHUB_NO_INDEX", default=False)
# A CA bundle for the index (an intranet mirror, or a proxy that inspects TLS).
TOOLHUB_INDEX_CERT = env.str("TOOLHUB_INDEX_CERT", default=os.environ.get("SSL_CERT_FILE", ""))
# The approval queue shows what the index says about each name, looked up by a task with this
# limit per index (seconds), and asked again after TOOLHUB_INDEX_CHECK_MAX_AGE seconds.
TOOLHUB_INDEX_CHECK_TIMEOUT = env.float("TOOLHUB_INDEX_CHECK_TIMEOUT", default=10.0)
TOOLHUB_INDEX_CHECK_MAX_AGE = env.int("TOOLHUB_INDEX_CHECK_MAX_AGE", default=24 * 3600)
TOOLHUB_BUILD_TIMEOUT = env.float("TOOLHUB_BUILD_TIMEOUT", default=900.0)
TOOLHUB_BUILD_SILENCE_TIMEOUT = env.float("TOOLHUB_BUILD_SILENCE_TIMEOUT", default=300.0)
# What one lock or install step may download in all, and how many files uv fetches at once (with
# its own default, 50, a 108-package lock failed with a "tunnel error" and with 8 it built; the
# build's egress forwarder keeps at most 64 connections open).
TOOLHUB_BUILD_MAX_DOWNLOAD_BYTES = env.int("TOOLHUB_BUILD_MAX_DOWNLOAD_BYTES", default=8 * 1024**3)
TOOLHUB_BUILD_CONCURRENT_DOWNLOADS = env.int("TOOLHUB_BUILD_CONCURRENT_DOWNLOADS", default=8)
# Locks and installs run as this unprivileged user in bubblewrap (toolhub/sandbox/build.py);
# scripts/system-setup creates it.
TOOLHUB_BUILD_USER = env.str("TOOLHUB_BUILD_USER", default="toolhub-build")
# Only wheels: no package's build code runs, except for the packages an admin allowed to be
# built from source in the package queue. Off, every package may build from source (inside
# the build sandbox), also while it still waits for approval as a transitive dependency.
TOOLHUB_ONLY_BINARY = env.bool("TOOLHUB_ONLY_BINARY", default=True)
TOOLHUB_APPROVE_TRANSITIVE = env.bool("TOOLHUB_APPROVE_TRANSITIVE", default=False)
# Packages every toolkit environment gets (requirement strings, such as "requests>=2"): what an
# organisation wants everywhere, e.g. what Open WebUI's own process offers its tools. Set by
# whoever runs ToolHub, so they need no approval, and imports of them are not inferred.
TOOLHUB_ENVIRONMENT_PACKAGES = env.list("TOOLHUB_ENVIRONMENT_PACKAGES", default=[])

# SANDBOX
# ------------------------------------------------------------------------------
TOOLHUB_BWRAP = env.str("TOOLHUB_BWRAP", default="bwrap")
TOOLHUB_SANDBOX_USER = env.str("TOOLHUB_SANDBOX_USER", default="toolhub-sandbox")
# Sandboxes run as uids leased from a pool of this many users (toolhub-sb-0000...), created by
# scripts/system-setup with the same variable; 0 runs every sandbox as TOOLHUB_SANDBOX_USER.
TOOLHUB_SANDBOX_UIDS = env.int("TOOLHUB_SANDBOX_UIDS", default=16)
# The number of the pool's first user (toolhub-sb-<first>...): two ToolHubs on one host (or the
# test suite's parts) each take a range of their own.
TOOLHUB_SANDBOX_UID_FIRST = env.int("TOOLHUB_SANDBOX_UID_FIRST", default=0)
# Warm sandboxes (toolhub/sandbox/warm.py): how many idle ones each worker process keeps per
# environment (0: every call starts a cold sandbox), how long an idle one lives, and after how
# many calls or seconds one is retired. Every call runs in a process of its own and is cleaned
# up after; retiring by count bounds what could still drift. A successor's start costs ~0.25 s
# of CPU; it is started ahead (toolhub/sandbox/warm_pool.py), but a worker busy with calls back
# to back still waits for it. At 100 calls that was ~2.5 ms of CPU a call and ~13% of a busy
# worker's rate (README, Warm sandboxes).
TOOLHUB_SANDBOX_WARM = env.int("TOOLHUB_SANDBOX_WARM", default=1)
TOOLHUB_SANDBOX_WARM_IDLE_SECONDS = env.float("TOOLHUB_SANDBOX_WARM_IDLE_SECONDS", default=300.0)
TOOLHUB_SANDBOX_WARM_MAX_CALLS = env.int("TOOLHUB_SANDBOX_WARM_MAX_CALLS", default=1000)
TOOLHUB_SANDBOX_WARM_MAX_AGE = env.float("TOOLHUB_SANDBOX_WARM_MAX_AGE", default=600.0)
# The idle warm sandboxes one worker process keeps in all: each holds one of the host's
# TOOLHUB_SANDBOX_UIDS for its life, so keep (this + 1) x the processes running tool calls
# below TOOLHUB_SANDBOX_UIDS, or cold runs wait for a uid.
TOOLHUB_SANDBOX_WARM_MAX_IDLE = env.int("TOOLHUB_SANDBOX_WARM_MAX_IDLE", default=4)
# At start each worker process warms a sandbox for each of the this many environments the
# invocations of the last TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS used most (toolhub/runs/warming.py).
TOOLHUB_SANDBOX_WARM_START = env.int("TOOLHUB_SANDBOX_WARM_START", default=4)
TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS = env.float("TOOLHUB_SANDBOX_WARM_HISTORY_SECONDS", default=3600.0)
# The memory all warm sandboxes of this host may use together, counted by the PSS each one
# measured when it was ready (0: no budget); the shares are files locked by their holders in
# TOOLHUB_SANDBOX_WARM_BUDGET_DIR (root's, 0700). A call that finds no room runs cold.
TOOLHUB_SANDBOX_WARM_MEMORY_MB = env.int("TOOLHUB_SANDBOX_WARM_MEMORY_MB", default=1024)
TOOLHUB_SANDBOX_WARM_BUDGET_DIR = env.str("TOOLHUB_SANDBOX_WARM_BUDGET_DIR", default="/run/toolhub-warm-sandboxes")
# Host-wide (not per data dir): the uids are the host's. Root's, mode 0700.
TOOLHUB_SANDBOX_UID_LOCK_DIR = env.str("TOOLHUB_SANDBOX_UID_LOCK_DIR", default="/run/toolhub-sandbox-uids")
TOOLHUB_SANDBOX_WALL_SECONDS = env.float("TOOLHUB_SANDBOX_WALL_SECONDS", default=30.0)
TOOLHUB_SANDBOX_CPU_SECONDS = env.int("TOOLHUB_SANDBOX_CPU_SECONDS", default=10)
TOOLHUB_SANDBOX_MEMORY_MB = env.int("TOOLHUB_SANDBOX_MEMORY_MB", default=1024)
TOOLHUB_SANDBOX_OUTPUT_MB = env.int("TOOLHUB_SANDBOX_OUTPUT_MB", default=8)
TOOLHUB_EVENT_CALL_TIMEOUT = env.float("TOOLHUB_EVENT_CALL_TIMEOUT", default=120.0)
# Fair use per invocation: events a tool may send (count and JSON bytes), then it is stopped.
TOOLHUB_MAX_EVENTS = env.int("TOOLHUB_MAX_EVENTS", default=2000)
# Fair use per user (toolhub.runs.services.check_fair_use): invocations queued, running or
# waiting at once, and accepted per minute; beyond either, 429 with Retry-After.
TOOLHUB_USER_MAX_ACTIVE = env.int("TOOLHUB_USER_MAX_ACTIVE", default=10)
TOOLHUB_USER_INVOCATIONS_PER_MINUTE = env.int("TOOLHUB_USER_INVOCATIONS_PER_MINUTE", default=60)
TOOLHUB_MAX_EVENT_BYTES = env.int("TOOLHUB_MAX_EVENT_BYTES", default=2 * 1024 * 1024)
TOOLHUB_INVOKE_WAIT_SECONDS = env.float("TOOLHUB_INVOKE_WAIT_SECONDS", default=30.0)
# How long an MCP or OpenAPI tool call waits for its invocation (the sandbox's wall limit
# plus a question's answer time fit in it).
TOOLHUB_SERVE_WAIT_SECONDS = env.float("TOOLHUB_SERVE_WAIT_SECONDS", default=180.0)
# Browser origins allowed to call the OpenAPI tool servers (Open WebUI's user tool servers);
# none by default, so no browser page of another origin can call them.
TOOLHUB_CORS_ORIGINS = env.list("TOOLHUB_CORS_ORIGINS", default=[])
# /mcp: browser origins allowed to call it (a request without Origin, from a server, always
# may), and the Host names it answers to (empty: ALLOWED_HOSTS without a "*", else only the
# local names): the MCP specification's guard against DNS rebinding.
TOOLHUB_MCP_ALLOWED_ORIGINS = [o.rstrip("/") for o in env.list("TOOLHUB_MCP_ALLOWED_ORIGINS", default=[])]
TOOLHUB_MCP_ALLOWED_HOSTS = env.list("TOOLHUB_MCP_ALLOWED_HOSTS", default=[])
# The catalogue of every toolkit: MCP's tools/list gives this many toolkits a page (clients
# follow nextCursor); the combined OpenAPI document lists at most this many, and past that
# answers 413 naming the per-toolkit URLs.
TOOLHUB_MCP_PAGE_TOOLKITS = env.int("TOOLHUB_MCP_PAGE_TOOLKITS", default=100)
TOOLHUB_OPENAPI_MAX_TOOLKITS = env.int("TOOLHUB_OPENAPI_MAX_TOOLKITS", default=2000)
# Calls per minute through MCP and the OpenAPI tool servers: per client credential and per
# user (a client credential may set its own); 0 switches a limit off.
TOOLHUB_CLIENT_CALLS_PER_MINUTE = env.int("TOOLHUB_CLIENT_CALLS_PER_MINUTE", default=600)
TOOLHUB_USER_CALLS_PER_MINUTE = env.int("TOOLHUB_USER_CALLS_PER_MINUTE", default=60)
# Queued work (an invocation, a step of a build) that no worker took this long after its task
# was sent is sent again by the reaper: the message may have been lost with a broker that
# restarted without persistence (a second delivery of a task is ignored). After
# TOOLHUB_RESEND_MAX such re-sends it is failed, with the reason.
TOOLHUB_RESEND_AFTER_SECONDS = env.float("TOOLHUB_RESEND_AFTER_SECONDS", default=60.0)
TOOLHUB_RESEND_MAX = env.int("TOOLHUB_RESEND_MAX", default=3)
# An agent run still queued this long after it was accepted is failed by its reaper.
TOOLHUB_STALE_AFTER_SECONDS = env.float("TOOLHUB_STALE_AFTER_SECONDS", default=300.0)

# AGENT RUNS
# ------------------------------------------------------------------------------
# A run's total time (model and tool calls included) and tokens (prompt + completion, as the
# endpoint reports them); runs a user may start per hour; tools per run.
TOOLHUB_AGENT_MAX_SECONDS = env.float("TOOLHUB_AGENT_MAX_SECONDS", default=300.0)
TOOLHUB_AGENT_MAX_TOKENS = env.int("TOOLHUB_AGENT_MAX_TOKENS", default=100_000)
TOOLHUB_AGENT_RUNS_PER_HOUR = env.int("TOOLHUB_AGENT_RUNS_PER_HOUR", default=60)
TOOLHUB_AGENT_MAX_TOOLS = env.int("TOOLHUB_AGENT_MAX_TOOLS", default=20)
# Tool calls a run may make in all, and after one model answer (every call is an invocation in
# a sandbox of its own, with the user's fair-use limits besides).
TOOLHUB_AGENT_MAX_TOOL_CALLS = env.int("TOOLHUB_AGENT_MAX_TOOL_CALLS", default=50)
TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER = env.int("TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER", default=10)

# NETWORK EGRESS (for toolkits an admin granted it)
# ------------------------------------------------------------------------------
TOOLHUB_EGRESS_MAX_BYTES = env.int("TOOLHUB_EGRESS_MAX_BYTES", default=50 * 1024 * 1024)
TOOLHUB_EGRESS_MAX_CONNECTIONS = env.int("TOOLHUB_EGRESS_MAX_CONNECTIONS", default=50)

# OIDC
# ------------------------------------------------------------------------------
# Sign-in with the organisation's identity provider (toolhub.accounts.oidc, docs/people.md). Off
# while TOOLHUB_OIDC_ISSUER is empty; its endpoints come from <issuer>/.well-known/openid-configuration.
TOOLHUB_OIDC_ISSUER = env.str("TOOLHUB_OIDC_ISSUER", default="")
# The name on the login page's button: "Sign in with <name>".
TOOLHUB_OIDC_PROVIDER_NAME = env.str("TOOLHUB_OIDC_PROVIDER_NAME", default="your organisation")
OIDC_RP_CLIENT_ID = env.str("TOOLHUB_OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("TOOLHUB_OIDC_CLIENT_SECRET", default="")
OIDC_RP_SCOPES = env.str("TOOLHUB_OIDC_SCOPES", default="openid email profile")
OIDC_RP_SIGN_ALGO = env.str("TOOLHUB_OIDC_SIGN_ALGO", default="RS256")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_CREATE_USER = True
# Only emails of these domains may sign in (empty: any).
TOOLHUB_OIDC_ALLOWED_DOMAINS = env.list("TOOLHUB_OIDC_ALLOWED_DOMAINS", default=[])
# The claim that lists a person's groups; its values become their ToolHub groups at each sign-in,
# created on first use with TOOLHUB_OIDC_CREATE_GROUPS, else only those that exist.
TOOLHUB_OIDC_GROUPS_CLAIM = env.str("TOOLHUB_OIDC_GROUPS_CLAIM", default="groups")
TOOLHUB_OIDC_CREATE_GROUPS = env.bool("TOOLHUB_OIDC_CREATE_GROUPS", default=False)
# Values of the groups claim that make an admin or an author (anyone else is a user).
TOOLHUB_OIDC_ADMIN_GROUPS = env.list("TOOLHUB_OIDC_ADMIN_GROUPS", default=[])
TOOLHUB_OIDC_AUTHOR_GROUPS = env.list("TOOLHUB_OIDC_AUTHOR_GROUPS", default=[])
# Whether the password form stays on the login page beside the provider's button.
TOOLHUB_OIDC_LOCAL_PASSWORDS = env.bool("TOOLHUB_OIDC_LOCAL_PASSWORDS", default=True)
# The provider's code flow is a backend of its own, only when there is a provider.
if TOOLHUB_OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("toolhub.accounts.oidc.ToolHubOIDCBackend")

# PEOPLE
# ------------------------------------------------------------------------------
# How long an invitation link (made on the Users page or by POST /api/v1/users) stays valid.
TOOLHUB_INVITATION_DAYS = env.int("TOOLHUB_INVITATION_DAYS", default=7)

# OPERATIONS (toolhub.ops; docs/deploying.md)
# ------------------------------------------------------------------------------
# This host's name in what a worker reports (a call that failed because this host could not
# build the toolkit's environment names it; docs/deploying.md, "Several machines").
TOOLHUB_HOST_NAME = env.str("TOOLHUB_HOST_NAME", default=socket.gethostname())
# How long /readyz waits for the workers' answers to its broadcast.
TOOLHUB_READY_TIMEOUT_SECONDS = env.float("TOOLHUB_READY_TIMEOUT_SECONDS", default=1.0)
# Who may read /metrics: clients from these addresses or networks (CIDR), and any client that
# sends `Authorization: Bearer <TOOLHUB_METRICS_TOKEN>` when that is set. Behind a reverse
# proxy every client has the proxy's address: set a token and empty the list.
TOOLHUB_METRICS_ALLOW = env.list("TOOLHUB_METRICS_ALLOW", default=["127.0.0.1/32", "::1/128"])
TOOLHUB_METRICS_TOKEN = env.str("TOOLHUB_METRICS_TOKEN", default="")
# The most series one labelled metric of /metrics holds (invocations by toolkit, tool,
# surface and outcome: the busiest first).
TOOLHUB_METRICS_MAX_SERIES = env.int("TOOLHUB_METRICS_MAX_SERIES", default=5000)

# LOGGING
# ------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

