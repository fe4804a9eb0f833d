"""Settings for tarsy-scoring, read from the environment.

Every variable is listed in the README's configuration table. With nothing set,
the service runs on one machine: SQLite in the project folder, the django-q2
ORM broker and an in-process channel layer. ``REDIS_URL`` switches the broker,
the channel layer and the cache to Redis so that several web and worker
processes can share them.
"""

import base64
import hashlib
import ipaddress
import json
import math
import os
import re
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from scoring.tarsy.url import canonical_url, plain_http_problem, tarsy_url_problem
from tarsy_scoring.private_files import read_or_create

# litellm fetches its model cost map from the internet when imported unless told
# otherwise; every process that may import it inherits this.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TARSY_SCORING_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false)")


def env_number(name: str, default, cast=float):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return cast(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from exc


def env_optional_number(name: str, default, cast=float):
    """``env_number``, where ``none`` means no value (None)."""
    if os.environ.get(name, "").strip().lower() == "none":
        return None
    return env_number(name, default, cast)


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once per install.

    Shipping a fixed key would let anyone forge sessions on every default
    install, so the fallback is random and kept in the var/ folder.
    """
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    return read_or_create(VAR_DIR / "secret_key", lambda: secrets.token_urlsafe(50))[0]


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "channels",
    "axes",
    "scoring",
]

MIDDLEWARE = [
    # First, so that it counts and times every answer, the refusals below included
    # (/metrics, docs/observability.md).
    "scoring.ops.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Bodies over DATA_UPLOAD_MAX_MEMORY_SIZE (MAX_REQUEST_BODY_BYTES) get 413 before any
    # view reads them (DRF's JSON parser would not check the limit itself).
    "tarsy_scoring.request_limits.RequestBodyLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "scoring.auth.TrustedProxyUserMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # A browser that signs in by password is known to that account from then on (scoring/signin.py).
    "scoring.signin.KnownClientMiddleware",
    # Last, as django-axes requires: it turns a locked-out sign-in into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "tarsy_scoring.urls"
WSGI_APPLICATION = "tarsy_scoring.wsgi.application"
ASGI_APPLICATION = "tarsy_scoring.asgi.application"

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
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web and worker processes share the file: WAL lets readers run beside the
    # writer, IMMEDIATE takes the write lock when a transaction starts (so two
    # writers queue on the busy timeout instead of failing to upgrade a read
    # lock), and the timeout is how long a writer waits for that lock.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": env_number("SQLITE_BUSY_TIMEOUT_S", 30),
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
else:
    # Django gives each ASGI request's sync code a thread of its own, so a kept
    # (CONN_MAX_AGE) connection is never reused there: every request would open one.
    # A per-process pool hands connections to whichever thread asks; with health
    # checks on, the pool checks a connection before handing it out.
    _pool_max_size = env_number("DB_POOL_MAX_SIZE", 10, int)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    if _pool_max_size > 0:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's pool requires it
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env_number("DB_POOL_MIN_SIZE", 2, int), _pool_max_size),
            "max_size": _pool_max_size,
            # How long a thread waits for a free connection before its query fails.
            "timeout": env_number("DB_POOL_TIMEOUT_S", 10.0),
        }
    else:
        DATABASES["default"]["CONN_MAX_AGE"] = env_number("DB_CONN_MAX_AGE_S", 60, int)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis (unset = single-machine defaults) --------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Auth -------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The dashboard's own sign-in and sign-out (the admin keeps its own pages).
LOGIN_URL = "scoring:login"
LOGIN_REDIRECT_URL = "scoring:session-list"
LOGOUT_REDIRECT_URL = "scoring:login"

# Password sign-ins (the dashboard's and the admin's) go through django-axes first:
# after LOGIN_FAILURE_LIMIT failures for one user name from one address, that pair is
# refused (HTTP 429) for LOGIN_LOCKOUT_S, even with the right password. Locking by
# address alone would lock everyone out behind oauth2-proxy (one address for all);
# by name alone would let anyone lock an operator out from anywhere. Past
# LOGIN_ACCOUNT_FAILURE_LIMIT failures of one name from every address within
# LOGIN_LOCKOUT_S, the name is refused to the browsers that never signed in to it
# (scoring/signin.py). Failures are kept in the database, so every web process counts
# them. `manage.py axes_reset` lifts every lockout (docs/deploy.md).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_number("LOGIN_FAILURE_LIMIT", 5, int)
LOGIN_ACCOUNT_FAILURE_LIMIT = env_number("LOGIN_ACCOUNT_FAILURE_LIMIT", 20, int)
_login_lockout_s = env_number("LOGIN_LOCKOUT_S", 900, int)
for _name, _value in (
    ("LOGIN_FAILURE_LIMIT", AXES_FAILURE_LIMIT),
    ("LOGIN_ACCOUNT_FAILURE_LIMIT", LOGIN_ACCOUNT_FAILURE_LIMIT),
    ("LOGIN_LOCKOUT_S", _login_lockout_s),
):
    if _value < 1:
        raise ImproperlyConfigured(f"{_name}={_value} is too small (at least 1)")
AXES_COOLOFF_TIME = timedelta(seconds=_login_lockout_s)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "scoring.signin.SignInHandler"
# Behind oauth2-proxy the peer is the proxy for everyone: count by the address it forwards.
AXES_CLIENT_IP_CALLABLE = "scoring.auth.client_address"
AXES_RESET_ON_SUCCESS = True
# A refused attempt (its password unchecked) is not a failure: a lockout ends LOGIN_LOCKOUT_S
# after the failure that caused it, however often it is knocked on meanwhile.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_VERBOSE = False  # no banner in every process's log


def env_networks(name: str, default: str):
    """A comma-separated list of addresses or CIDR ranges."""
    try:
        return [ipaddress.ip_network(item, strict=False) for item in env_list(name, default)]
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from exc


# Addresses (or CIDR ranges) of the oauth2-proxy in front of us. Only requests
# from these may name their user in X-Forwarded-User / X-Forwarded-Email.
TRUSTED_PROXY_IPS = env_networks("TRUSTED_PROXY_IPS", "127.0.0.1/32,::1/128")
# How many proxies, the one in TRUSTED_PROXY_IPS included, each append to X-Forwarded-For: the
# client's address is the entry this many from its right (scoring.auth.client_address). TARSy's
# layout, an OpenShift router then oauth2-proxy as a sidecar on loopback, is 2.
TRUSTED_PROXY_HOPS = env_number("TRUSTED_PROXY_HOPS", 1, int)
if TRUSTED_PROXY_HOPS < 1:
    raise ImproperlyConfigured(f"TRUSTED_PROXY_HOPS={TRUSTED_PROXY_HOPS} is too small (at least 1)")

# --- Internationalisation, static files --------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Large TARSy sessions are POSTed whole; the limit applies to the request body.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_number("MAX_REQUEST_BODY_BYTES", 64 * 1024 * 1024, int)

# --- REST API -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "scoring.auth.TrustedProxyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "scoring.api.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "tarsy_scoring.csp.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "tarsy-scoring API",
    "DESCRIPTION": "LLM-judge scoring of TARSy alert sessions (EP-0028).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs pages describe the API; they grant nothing.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "SessionStatusEnum": "scoring.models.SessionStatus.choices",
        "ScoringStatusEnum": "scoring.models.ScoringStatus.choices",
        "TrialStatusEnum": "scoring.models.TrialStatus.choices",
    },
}

# User names that may store sessions (POST /api/v1/sessions/) without the
# scoring.change_alertsession permission: TARSy's service account.
SESSION_WRITERS = env_list("SESSION_WRITERS", "")

# --- Judge LLM ------------------------------------------------------------------------
SCORING_LLM_MODEL = os.environ.get("SCORING_LLM_MODEL", "")
SCORING_LLM_API_BASE = os.environ.get("SCORING_LLM_API_BASE", "") or None
SCORING_LLM_API_KEY = os.environ.get("SCORING_LLM_API_KEY", "") or None
# The longest the judge may send nothing: before its reply's first chunk (a local model reads
# the whole prompt first), and between chunks of the streamed reply (docs/llm.md).
SCORING_LLM_TIMEOUT_S = env_number("SCORING_LLM_TIMEOUT_S", 120.0)
SCORING_LLM_MAX_RETRIES = env_number("SCORING_LLM_MAX_RETRIES", 3, int)
SCORING_LLM_BACKOFF_S = env_number("SCORING_LLM_BACKOFF_S", 1.0)
SCORING_LLM_MAX_RETRY_AFTER_S = env_number("SCORING_LLM_MAX_RETRY_AFTER_S", 60.0)
# How long a scoring may keep waiting on the provider's quota (429s), from its first
# 429, before it fails saying so; waits never use up SCORING_LLM_MAX_RETRIES (docs/llm.md).
SCORING_RATE_LIMIT_PATIENCE_S = env_number("SCORING_RATE_LIMIT_PATIENCE_S", 21600.0)
# The judge model's known limits, requests and prompt tokens a minute for every worker
# together (0: 95% of what the provider's answers announce, if they do); calls are paced to
# them (scoring/judge/pacing.py, docs/llm.md).
SCORING_LLM_RPM = env_number("SCORING_LLM_RPM", 0, int)
SCORING_LLM_TPM = env_number("SCORING_LLM_TPM", 0, int)
# The judge's sampling: a low temperature and a fixed seed, so that scoring a session again
# gives much the same score; each is sent only where the model takes it ("none": not sent,
# the provider's default applies). Recorded on each score, part of the judge's identity (docs/llm.md).
SCORING_LLM_TEMPERATURE = env_optional_number("SCORING_LLM_TEMPERATURE", 0.0)
SCORING_LLM_SEED = env_optional_number("SCORING_LLM_SEED", 0, int)
if SCORING_LLM_TEMPERATURE is not None and not 0 <= SCORING_LLM_TEMPERATURE <= 2:
    raise ImproperlyConfigured(f"SCORING_LLM_TEMPERATURE={SCORING_LLM_TEMPERATURE:g} is out of range (from 0 to 2)")
SCORING_CIRCUIT_FAILURE_THRESHOLD = env_number("SCORING_CIRCUIT_FAILURE_THRESHOLD", 5, int)
SCORING_CIRCUIT_COOLDOWN_S = env_number("SCORING_CIRCUIT_COOLDOWN_S", 60.0)
# A scoring whose whole judge prompt is estimated (4 characters a token) above this fails
# before any call: a bound on the work of one scoring (about 40 MB). Below it, the prompt is
# fitted to the judge model's context window (docs/rendering.md).
SCORING_MAX_INPUT_TOKENS = env_number("SCORING_MAX_INPUT_TOKENS", 10_000_000, int)
# The judge model's context window in tokens when litellm's model list does not know the model.
SCORING_LLM_CONTEXT_TOKENS = env_number("SCORING_LLM_CONTEXT_TOKENS", 128_000, int)
# Turn 1 runs this many times at once; the score is their median (docs/scoring.md). Each
# sample costs a turn 1 (tokens, money, provider quota): more than a few sharpen little.
SCORING_JUDGE_SAMPLES = env_number("SCORING_JUDGE_SAMPLES", 1, int)
# Samples further apart than this many points mark the score unstable: over half the
# width of the "weak" band (50-74), so such samples often fall in different bands.
SCORING_UNSTABLE_SPREAD = env_number("SCORING_UNSTABLE_SPREAD", 15, int)
# Days a score's transcript (what the judge was sent and what it wrote) is kept; 0: none kept.
SCORING_TRANSCRIPT_RETENTION_DAYS = env_number("SCORING_TRANSCRIPT_RETENTION_DAYS", 30, float)
if SCORING_TRANSCRIPT_RETENTION_DAYS < 0:
    raise ImproperlyConfigured(
        f"SCORING_TRANSCRIPT_RETENTION_DAYS={SCORING_TRANSCRIPT_RETENTION_DAYS:g} is too small (at least 0)"
    )
for _name, _value, _least, _most in (
    ("SCORING_JUDGE_SAMPLES", SCORING_JUDGE_SAMPLES, 1, 10),
    ("SCORING_UNSTABLE_SPREAD", SCORING_UNSTABLE_SPREAD, 0, 100),
):
    if not _least <= _value <= _most:
        raise ImproperlyConfigured(f"{_name}={_value} is out of range (from {_least} to {_most})")

# --- Judge jobs (django-q2) --------------------------------------------------------------
# A scoring job must finish within SCORING_JOB_TIMEOUT_S: the LLM client caps each
# call at the time the job has left.
SCORING_JOB_TIMEOUT_S = env_number("SCORING_JOB_TIMEOUT_S", 900, int)
# Worker processes per cluster, judge jobs run at once by each, and in all.
SCORING_WORKERS = env_number("SCORING_WORKERS", 2, int)
SCORING_CONCURRENCY_PER_WORKER = env_number("SCORING_CONCURRENCY_PER_WORKER", 20, int)
SCORING_MAX_IN_FLIGHT = env_number("SCORING_MAX_IN_FLIGHT", 200, int)
# Judge calls the judge model serves at once, across every worker (0: no limit but the above): a
# local server with one slot answers one request at a time and queues the others, their
# timeouts running (scoring/judge/pacing.py, docs/llm.md).
SCORING_JUDGE_CONCURRENCY = env_number("SCORING_JUDGE_CONCURRENCY", 0, int)
if SCORING_JUDGE_CONCURRENCY < 0:
    raise ImproperlyConfigured(f"SCORING_JUDGE_CONCURRENCY={SCORING_JUDGE_CONCURRENCY} is too small (at least 0)")
# How often a worker process with free slots looks for pending scores when no
# wake-up task arrives (the pending row is the job: scoring/jobs/runtime.py).
SCORING_WORKER_POLL_S = env_number("SCORING_WORKER_POLL_S", 1.0, float)
# A pending row that no worker has claimed after this long is marked failed.
SCORING_PENDING_TIMEOUT_S = env_number("SCORING_PENDING_TIMEOUT_S", 3600, int)
# MCP prioritization reports (scoring.insights.reports): the time limit of one, all
# its judge calls included, and the context window its calls are cut to fit (tokens;
# 0: the judge's window as scorings take it, scoring.judge.fitting.context_window).
SCORING_REPORT_TIMEOUT_S = env_number("SCORING_REPORT_TIMEOUT_S", 900, int)
SCORING_REPORT_WINDOW_TOKENS = env_number("SCORING_REPORT_WINDOW_TOKENS", 0, int)
# A report reads the missing-tools analyses of at most this many scores, the newest.
SCORING_REPORT_MAX_SCORES = env_number("SCORING_REPORT_MAX_SCORES", 500, int)
# A request that would read the same scores with the same judge model as a report completed this
# long ago or less gets that report (one pending or in progress, whatever its age); 0: only those.
SCORING_REPORT_REUSE_S = env_number("SCORING_REPORT_REUSE_S", 86400, int)
# The share of the judge slots reports may hold at once, of each worker process's and of
# SCORING_MAX_IN_FLIGHT (one at least), so that scorings keep moving behind a queue of reports.
SCORING_REPORT_SLOT_SHARE = env_number("SCORING_REPORT_SLOT_SHARE", 0.25)
# The same for trials' scorings (docs/insights.md, "Trials"): a trial of hundreds of sessions
# takes at most this share, and scorings keep the rest.
SCORING_TRIAL_SLOT_SHARE = env_number("SCORING_TRIAL_SLOT_SHARE", 0.5)
if SCORING_REPORT_REUSE_S < 0:
    raise ImproperlyConfigured(f"SCORING_REPORT_REUSE_S={SCORING_REPORT_REUSE_S} is too small (at least 0)")
for _share in ("SCORING_REPORT_SLOT_SHARE", "SCORING_TRIAL_SLOT_SHARE"):
    if not 0 < globals()[_share] <= 1:
        raise ImproperlyConfigured(f"{_share}={globals()[_share]:g} is out of range (above 0, at most 1)")

# Agreement figures (judge against reviewers, our judge against Go TARSy's) resting on fewer
# sessions than this are withheld as "too few reviews" (scoring.insights.confidence;
# docs/insights.md, "How sure a figure is").
SCORING_AGREEMENT_MINIMUM_SESSIONS = env_number("SCORING_AGREEMENT_MINIMUM_SESSIONS", 5, int)
if SCORING_AGREEMENT_MINIMUM_SESSIONS < 1:
    raise ImproperlyConfigured(
        f"SCORING_AGREEMENT_MINIMUM_SESSIONS={SCORING_AGREEMENT_MINIMUM_SESSIONS} is too small (at least 1)"
    )

Q_CLUSTER = {
    "name": "tarsy-scoring",
    "workers": SCORING_WORKERS,
    # Every task is short: the orphan cleanup, and judge wake-ups that return at
    # once (the judge job itself runs on a thread of the worker process, bounded
    # by SCORING_JOB_TIMEOUT_S; scoring/jobs/runtime.py).
    "timeout": 300,
    # The broker hands a task out again if it is not acknowledged within
    # `retry` seconds; it must exceed the longest task, or that task runs twice.
    "queue_limit": SCORING_WORKERS,
    "retry": 360,
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    # Recycling a worker process would end the judge jobs running in it.
    "recycle": 1_000_000,
    "save_limit": 1000,
    "poll": 0.2,
    "label": "Judge jobs",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Sync from a running TARSy (scoring.tarsy.sync, docs/sync.md) -------------------------
# Set: each worker cluster syncs sessions from this TARSy every TARSY_SYNC_INTERVAL_S
# (one cluster at a time across hosts). Also the default URL of `manage.py sync_sessions`.
TARSY_URL = os.environ.get("TARSY_URL", "").strip().rstrip("/")
if TARSY_URL and tarsy_url_problem(TARSY_URL):
    raise ImproperlyConfigured(f"TARSY_URL: {tarsy_url_problem(TARSY_URL)}")
# One spelling per TARSy: the key of its sync's state, metrics and checks.
TARSY_URL = TARSY_URL and canonical_url(TARSY_URL)
# Go TARSy's dashboard, for links from a Go session to its page there (/sessions/<id>);
# unset: TARSY_URL, where Go TARSy serves its dashboard beside its API. Empty: no links.
TARSY_DASHBOARD_URL = os.environ.get("TARSY_DASHBOARD_URL", TARSY_URL).strip().rstrip("/")
if TARSY_DASHBOARD_URL and tarsy_url_problem(TARSY_DASHBOARD_URL):
    raise ImproperlyConfigured(f"TARSY_DASHBOARD_URL: {tarsy_url_problem(TARSY_DASHBOARD_URL)}")
# Sent as "Authorization: Bearer <token>" to TARSy: TARSY_TOKEN, or the content of TARSY_TOKEN_FILE
# (a projected ServiceAccount token, read again when it changes); white space around it removed.
TARSY_TOKEN = os.environ.get("TARSY_TOKEN", "").strip()
TARSY_TOKEN_FILE = os.environ.get("TARSY_TOKEN_FILE", "").strip()
if TARSY_TOKEN and TARSY_TOKEN_FILE:
    raise ImproperlyConfigured("TARSY_TOKEN and TARSY_TOKEN_FILE are both set: set one")
# PEM file of the CAs that sign TARSy's HTTPS certificate (a cluster's private CA); unset: the system's.
TARSY_CA_BUNDLE = os.environ.get("TARSY_CA_BUNDLE", "").strip()
if TARSY_CA_BUNDLE and not os.path.isfile(TARSY_CA_BUNDLE):
    raise ImproperlyConfigured(f"TARSY_CA_BUNDLE: no such file: {TARSY_CA_BUNDLE}")
# Credentials are sent over plain http only to this machine, unless this allows it.
TARSY_ALLOW_PLAIN_HTTP = env_bool("TARSY_ALLOW_PLAIN_HTTP", False)
_plain_http = TARSY_URL and plain_http_problem(
    TARSY_URL, has_credentials=bool(TARSY_TOKEN or TARSY_TOKEN_FILE), allowed=TARSY_ALLOW_PLAIN_HTTP
)
if _plain_http:
    raise ImproperlyConfigured(f"TARSY_URL: {_plain_http}")
TARSY_SYNC_INTERVAL_S = env_number("TARSY_SYNC_INTERVAL_S", 300.0)
# Go TARSy: also listen to its WebSocket's session events, so that a session that finished (or
# whose review or score changed) is pulled within seconds rather than at the next round.
TARSY_SYNC_EVENTS = env_bool("TARSY_SYNC_EVENTS", True)
# Each request to TARSy: its timeout, retries after a network error or 5xx, first wait (doubling).
TARSY_SYNC_TIMEOUT_S = env_number("TARSY_SYNC_TIMEOUT_S", 30.0)
TARSY_SYNC_MAX_RETRIES = env_number("TARSY_SYNC_MAX_RETRIES", 3, int)
TARSY_SYNC_BACKOFF_S = env_number("TARSY_SYNC_BACKOFF_S", 1.0)
# The largest answer read from TARSy (a whole session, for tarsy-bot): a larger one is refused.
TARSY_SYNC_MAX_ANSWER_BYTES = env_number("TARSY_SYNC_MAX_ANSWER_BYTES", 64 * 1024 * 1024, int)
# A run stops (keeping what it stored; the next one goes on) when it has run this long or read
# this many pages of TARSy's session list.
TARSY_SYNC_RUN_DEADLINE_S = env_number("TARSY_SYNC_RUN_DEADLINE_S", 1800.0)
TARSY_SYNC_MAX_PAGES = env_number("TARSY_SYNC_MAX_PAGES", 1000, int)
# Go TARSy: a session is assembled from about as many requests as it has interactions, this
# many at a time, within this long.
TARSY_SYNC_CONCURRENCY = env_number("TARSY_SYNC_CONCURRENCY", 4, int)
TARSY_SYNC_SESSION_DEADLINE_S = env_number("TARSY_SYNC_SESSION_DEADLINE_S", 300.0)
# Go TARSy: a run lists every finished session, not only those since the watermark, when the
# last run that did is older than this (a chat added to an old session shows then).
TARSY_SYNC_FULL_PASS_S = env_number("TARSY_SYNC_FULL_PASS_S", 21600.0)
# Go TARSy: between full passes, reviews and TARSy's own scores are looked for on the sessions
# created within this long (their lists are read whole at every run).
TARSY_SYNC_RECHECK_S = env_number("TARSY_SYNC_RECHECK_S", 604800.0)
# /readyz fails when the last successful sync started longer ago than this; 0: reported, never failed.
TARSY_SYNC_MAX_LAG_S = env_number("TARSY_SYNC_MAX_LAG_S", 0.0)
# Request a scoring of every session the periodic sync imports for the first time,
# at most SCORING_AUTO_SCORE_MAX_PER_DAY (UTC day, all processes) since each costs a judge call.
SCORING_AUTO_SCORE = env_bool("SCORING_AUTO_SCORE", False)
SCORING_AUTO_SCORE_MAX_PER_DAY = env_number("SCORING_AUTO_SCORE_MAX_PER_DAY", 100, int)
# Spend budgets in USD per UTC day and calendar month, counted from the cost stored on every
# scoring completed in the period (manual ones too); once one is used up, automatic scorings wait
# for the next period and manual ones ask for confirmation (scoring/budget.py). none: no budget.
SCORING_BUDGET_USD_PER_DAY = env_optional_number("SCORING_BUDGET_USD_PER_DAY", None)
SCORING_BUDGET_USD_PER_MONTH = env_optional_number("SCORING_BUDGET_USD_PER_MONTH", None)


def _auto_score_shares() -> dict:
    """SCORING_AUTO_SCORE_SHARES: which share (0 to 1) of the sessions a sync imports gets scored,
    as JSON: {"default": 1, "alert_types": {"<alert type>": 0.1}, "chains": {"<chain id>": 0.5}}.

    A setting rather than a table the admin edits: it sits with the other limits on what automatic
    scoring spends (the daily cap, the budgets) in the deployment's configuration, where operators
    review and version them together, is the same in every process, and a mistake in it stops the
    start instead of scoring every session."""
    name = "SCORING_AUTO_SCORE_SHARES"
    raw = os.environ.get("SCORING_AUTO_SCORE_SHARES", "").strip()
    try:
        shares = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}") from None
    if not isinstance(shares, dict) or set(shares) - {"default", "alert_types", "chains"}:
        raise ImproperlyConfigured(f'{name} must be a JSON object with only "default", "alert_types" and "chains"')

    def share(value, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ImproperlyConfigured(f"{name}: {where} is {value!r}, not a share from 0 to 1")
        return float(value)

    parsed = {"default": share(shares.get("default", 1), '"default"')}
    for key in ("alert_types", "chains"):
        names = shares.get(key, {})
        if not isinstance(names, dict):
            raise ImproperlyConfigured(f'{name}: "{key}" must be an object of names and shares')
        parsed[key] = {str(item): share(value, f'"{key}" "{item}"') for item, value in names.items()}
    return parsed


SCORING_AUTO_SCORE_SHARES = _auto_score_shares()
for _name, _value, _least in (
    ("TARSY_SYNC_INTERVAL_S", TARSY_SYNC_INTERVAL_S, 0.001),
    ("TARSY_SYNC_TIMEOUT_S", TARSY_SYNC_TIMEOUT_S, 0.001),
    ("TARSY_SYNC_MAX_RETRIES", TARSY_SYNC_MAX_RETRIES, 0),
    ("TARSY_SYNC_BACKOFF_S", TARSY_SYNC_BACKOFF_S, 0),
    ("TARSY_SYNC_MAX_ANSWER_BYTES", TARSY_SYNC_MAX_ANSWER_BYTES, 1024),
    ("TARSY_SYNC_RUN_DEADLINE_S", TARSY_SYNC_RUN_DEADLINE_S, 1),
    ("TARSY_SYNC_MAX_PAGES", TARSY_SYNC_MAX_PAGES, 1),
    ("TARSY_SYNC_CONCURRENCY", TARSY_SYNC_CONCURRENCY, 1),
    ("TARSY_SYNC_SESSION_DEADLINE_S", TARSY_SYNC_SESSION_DEADLINE_S, 1),
    ("TARSY_SYNC_FULL_PASS_S", TARSY_SYNC_FULL_PASS_S, 0),
    ("TARSY_SYNC_RECHECK_S", TARSY_SYNC_RECHECK_S, 0),
    ("SCORING_AUTO_SCORE_MAX_PER_DAY", SCORING_AUTO_SCORE_MAX_PER_DAY, 0),
    ("SCORING_BUDGET_USD_PER_DAY", SCORING_BUDGET_USD_PER_DAY, 0),
    ("SCORING_BUDGET_USD_PER_MONTH", SCORING_BUDGET_USD_PER_MONTH, 0),
):
    if _value is not None and _value < _least:
        raise ImproperlyConfigured(f"{_name}={_value:g} is too small (at least {_least:g})")
for _name, _value in (
    ("SCORING_BUDGET_USD_PER_DAY", SCORING_BUDGET_USD_PER_DAY),
    ("SCORING_BUDGET_USD_PER_MONTH", SCORING_BUDGET_USD_PER_MONTH),
):
    if _value is not None and not math.isfinite(_value):
        raise ImproperlyConfigured(f"{_name}={_value:g} is not an amount (use none for no budget)")

# --- Channels ---------------------------------------------------------------------------
if REDIS_URL:
    CHANNEL_LAYERS = {
        # redis-py's default 5 s socket timeout would drop a WebSocket idle for
        # 5 s: channels-redis blocks on Redis that long while waiting for messages.
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # capacity: messages a connection's channel may hold before channels-redis
            # drops new ones (its default, 100, is one busy batch for a dashboard
            # subscribed to many sessions; a dropped event comes later by resync).
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}], "capacity": 1000},
        }
    }
else:
    # channels' in-memory layer, its sweeps bounded (scoring/realtime/layers.py).
    CHANNEL_LAYERS = {"default": {"BACKEND": "scoring.realtime.layers.InMemoryChannelLayer"}}

# --- Logging -----------------------------------------------------------------------------
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")
# text: human-readable lines; json: one JSON object per line (docs/observability.md).
# Either way each record carries the fields of scoring.ops.logs.log_context (score_id, session_id).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").lower()
if LOG_FORMAT not in {"text", "json"}:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} is not a log format (use text or json)")
LOGGING_CONFIG = "scoring.ops.logs.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "scoring.ops.logs.ContextFilter"},
        "access_fields": {"()": "scoring.ops.logs.AccessFields"},
    },
    "formatters": {
        "text": {"()": "scoring.ops.logs.PlainFormatter"},
        "json": {"()": "scoring.ops.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "LiteLLM": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        # The web server's (tarsy_scoring/server.py): its lines go through the handler above.
        "uvicorn.access": {"filters": ["access_fields"]},
    },
}

# --- Events ---------------------------------------------------------------------------------
# Scoring events are stored (for WebSocket catchup) this long, then pruned.
SCORING_EVENT_RETENTION_S = env_number("SCORING_EVENT_RETENTION_S", 86400, int)
# Without Redis, each web process polls the events table this often to relay
# events written by worker processes to its WebSocket clients.
SCORING_EVENT_RELAY_POLL_S = env_number("SCORING_EVENT_RELAY_POLL_S", 0.2)
# With REDIS_URL: how often each web process rejoins its WebSocket connections to their groups
# and sends them stored events they missed (a Redis restart forgets groups; scoring/realtime/resync.py).
SCORING_EVENT_RESYNC_S = env_number("SCORING_EVENT_RESYNC_S", 2.0)
# How often each web process prunes old events.
SCORING_EVENT_PRUNE_INTERVAL_S = env_number("SCORING_EVENT_PRUNE_INTERVAL_S", 3600.0)

# --- Throttling and request size (the body limit's middleware is in MIDDLEWARE) --------------
# Requests for a scoring (POST .../score) per user: "<count>/<s|min|h|day>", or "" for no
# limit. The counts live in the cache: per process without REDIS_URL, so with several web
# processes set REDIS_URL to make the limit hold across them.
SCORING_POST_RATE = os.environ.get("SCORING_POST_RATE", "30/min").strip()
# MCP reports each user may have queued within the period, counted in the database (so in every
# process); a request answered with an existing report is free. Also "<count>/<period>" or "".
SCORING_REPORT_RATE = os.environ.get("SCORING_REPORT_RATE", "10/h").strip()
for _name, _rate in (("SCORING_POST_RATE", SCORING_POST_RATE), ("SCORING_REPORT_RATE", SCORING_REPORT_RATE)):
    if _rate and not re.fullmatch(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)", _rate):
        raise ImproperlyConfigured(
            f"{_name}={_rate!r} is not a rate: use <count>/<s|min|h|day> (e.g. 30/min), "
            "or leave it empty for no limit"
        )

# --- Production and observability ------------------------------------------------------------
# All off by default, so a laptop install on plain HTTP keeps working
# (docs/deploy.md, docs/observability.md).

# Behind a TLS-terminating proxy that sets X-Forwarded-Proto: requests it
# marks https are treated as secure. Only safe when every request comes
# through that proxy (it must overwrite the header a client sends).
TRUST_X_FORWARDED_PROTO = env_bool("TRUST_X_FORWARDED_PROTO", False)
if TRUST_X_FORWARDED_PROTO:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The site is served over HTTPS: session and CSRF cookies are sent over HTTPS only.
HTTPS = env_bool("HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
# Page scripts read the CSRF token from the page's <meta name="csrf-token">, forms
# carry it in a field: no script needs the cookie.
CSRF_COOKIE_HTTPONLY = True



def _csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


# Content-Security-Policy on every response (django-csp): scripts, styles, fonts and
# images only from this site, no inline script, nothing framed, forms only posted here.
# The one inline style allowed is the table-column alignment Markdown renders
# (scoring.markdown lets only text-align through). Pages made by third-party templates
# get inline styles too (tarsy_scoring/csp.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-hashes'"] + [_csp_hash(f"text-align:{side}") for side in ("left", "center", "right")],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Strict-Transport-Security max-age; 0 sends no header. Only sent on HTTPS requests.
SECURE_HSTS_SECONDS = env_number("HSTS_SECONDS", 0, int)

if not DEBUG and any(network.prefixlen == 0 for network in TRUSTED_PROXY_IPS):
    raise ImproperlyConfigured(
        "TRUSTED_PROXY_IPS includes every address (a /0 range): any client could name its user in "
        "X-Forwarded-User; list the oauth2-proxy's addresses or network instead"
    )

# Health and metrics (scoring.ops.health, scoring.ops.metrics).
READINESS_CHECK_TIMEOUT_S = env_number("READINESS_CHECK_TIMEOUT_S", 2.0)
# /readyz fails when no worker cluster has reported for this long; 0 skips that check.
WORKER_HEARTBEAT_MAX_AGE_S = env_number("WORKER_HEARTBEAT_MAX_AGE_S", 60.0)
# Set: /metrics requires "Authorization: Bearer <METRICS_TOKEN>". Unset: /metrics answers
# only loopback, TRUSTED_PROXY_IPS and these addresses or ranges (the Prometheus scrapers).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOWED_IPS = env_networks("METRICS_ALLOWED_IPS", "")
# prometheus_client reads PROMETHEUS_MULTIPROC_DIR itself; a missing folder would
# only fail at the first scrape, so say so at start.
_multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if _multiproc_dir and not Path(_multiproc_dir).is_dir():
    raise ImproperlyConfigured(f"PROMETHEUS_MULTIPROC_DIR={_multiproc_dir!r} is not a folder; create it first")
