"""tarsy_scoring.settings reads its configuration from the environment.

Each case loads the settings in a new Python process with exactly the
environment under test, as the web and worker processes do.
"""

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[1]


def load_settings(var_dir: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` after importing the settings; it may print ``result`` as JSON.

    The environment holds nothing but what Python needs plus ``env``, so the
    developer's own configuration cannot leak in.
    """
    program = "from django.conf import settings\n" + textwrap.dedent(code)
    child_env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "tarsy_scoring.settings",
        "TARSY_SCORING_VAR_DIR": str(var_dir),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", program], cwd=REPO_DIR, env=child_env, capture_output=True, text=True, timeout=60
    )


def settings_values(var_dir: Path, expression: str, **env: str):
    """The value of ``expression`` (e.g. ``"settings.DEBUG, settings.X"``: a list) under ``env``."""
    process = load_settings(var_dir, f"import json; print(json.dumps([{expression}], default=str))", **env)
    assert process.returncode == 0, process.stderr
    values = json.loads(process.stdout)
    return values[0] if len(values) == 1 else values


def test_default_database_is_sqlite_in_the_project_folder(tmp_path):
    database = settings_values(tmp_path, 'settings.DATABASES["default"]')

    assert database["ENGINE"] == "django.db.backends.sqlite3"
    assert database["NAME"] == str(REPO_DIR / "db.sqlite3")
    assert database["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert database["OPTIONS"]["timeout"] == 30


def test_sqlite_connections_use_wal_and_the_busy_timeout(tmp_path):
    code = """
        from django.db import connection
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            journal_mode = cursor.fetchone()[0]
            cursor.execute("PRAGMA busy_timeout")
            busy_timeout_ms = cursor.fetchone()[0]
        print(journal_mode, busy_timeout_ms)
    """
    process = load_settings(
        tmp_path, code, DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", SQLITE_BUSY_TIMEOUT_S="7"
    )

    assert process.returncode == 0, process.stderr
    assert process.stdout.split() == ["wal", "7000"]


def test_postgres_url_uses_a_health_checked_connection_pool(tmp_path):
    database = settings_values(
        tmp_path,
        'settings.DATABASES["default"]',
        DATABASE_URL="postgres://scorer:s3cret@db.example:6543/scoring?sslmode=require",
        DB_POOL_MIN_SIZE="3",
        DB_POOL_MAX_SIZE="12",
        DB_POOL_TIMEOUT_S="5",
    )

    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["HOST"], database["PORT"], database["NAME"]) == ("db.example", 6543, "scoring")
    assert (database["USER"], database["PASSWORD"]) == ("scorer", "s3cret")
    assert database["OPTIONS"]["pool"] == {"min_size": 3, "max_size": 12, "timeout": 5.0}
    assert database["OPTIONS"]["sslmode"] == "require"  # the URL's own options are kept
    assert database["CONN_MAX_AGE"] == 0
    assert database["CONN_HEALTH_CHECKS"] is True


def test_postgres_pool_off_keeps_connections_with_health_checks(tmp_path):
    database = settings_values(
        tmp_path,
        'settings.DATABASES["default"]',
        DATABASE_URL="postgres://scorer:s3cret@db.example:6543/scoring",
        DB_POOL_MAX_SIZE="0",
        DB_CONN_MAX_AGE_S="15",
    )

    assert "pool" not in database.get("OPTIONS", {})
    assert database["CONN_MAX_AGE"] == 15
    assert database["CONN_HEALTH_CHECKS"] is True


def test_without_redis_everything_stays_in_the_database_and_the_process(tmp_path):
    q_cluster, layer, cache = settings_values(
        tmp_path, 'settings.Q_CLUSTER, settings.CHANNEL_LAYERS["default"], settings.CACHES["default"]'
    )

    assert q_cluster["orm"] == "default"
    assert "redis" not in q_cluster
    assert layer["BACKEND"] == "scoring.realtime.layers.InMemoryChannelLayer"
    assert cache["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


def test_redis_url_switches_broker_channel_layer_and_cache_to_redis(tmp_path):
    redis_url = "redis://redis.example:6380/2"
    q_cluster, layer, cache = settings_values(
        tmp_path,
        'settings.Q_CLUSTER, settings.CHANNEL_LAYERS["default"], settings.CACHES["default"]',
        REDIS_URL=redis_url,
    )

    assert q_cluster["redis"] == redis_url
    assert "orm" not in q_cluster
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert [host["address"] for host in layer["CONFIG"]["hosts"]] == [redis_url]
    assert cache == {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url}


def test_broker_redelivery_window_covers_the_task_time_limit(tmp_path):
    """Judge jobs run on the worker's own threads; tasks are short and bounded by
    django-q2's timeout, so one delivered twice means a broker fault, not a long task."""
    q_cluster = settings_values(tmp_path, "settings.Q_CLUSTER", SCORING_JOB_TIMEOUT_S="2000", SCORING_WORKERS="3")

    assert q_cluster["retry"] > q_cluster["timeout"] > 0
    assert q_cluster["workers"] == q_cluster["queue_limit"] == 3


def test_booleans_and_lists_are_parsed(tmp_path):
    debug, hosts, proxies = settings_values(
        tmp_path,
        "settings.DEBUG, settings.ALLOWED_HOSTS, settings.TRUSTED_PROXY_IPS",
        DEBUG="Yes",
        ALLOWED_HOSTS="scoring.example.com, 10.0.0.5",
        TRUSTED_PROXY_IPS="10.1.0.0/16,10.2.3.4",
    )

    assert debug is True
    assert hosts == ["scoring.example.com", "10.0.0.5"]
    assert proxies == ["10.1.0.0/16", "10.2.3.4/32"]


def test_the_proxy_hops_and_the_accounts_failure_cap_are_read(tmp_path):
    names = "settings.TRUSTED_PROXY_HOPS, settings.LOGIN_ACCOUNT_FAILURE_LIMIT"
    assert settings_values(tmp_path, names) == [1, 20]
    assert settings_values(tmp_path, names, TRUSTED_PROXY_HOPS="2", LOGIN_ACCOUNT_FAILURE_LIMIT="8") == [2, 8]


def test_the_report_settings_are_read(tmp_path):
    names = ", ".join(
        f"settings.SCORING_REPORT_{name}" for name in ("RATE", "REUSE_S", "SLOT_SHARE")
    )
    assert settings_values(tmp_path, names) == ["10/h", 86400, 0.25]
    assert settings_values(
        tmp_path, names, SCORING_REPORT_RATE="", SCORING_REPORT_REUSE_S="0", SCORING_REPORT_SLOT_SHARE="0.5"
    ) == ["", 0, 0.5]


def test_agreement_figures_need_five_sessions_unless_set(tmp_path):
    name = "settings.SCORING_AGREEMENT_MINIMUM_SESSIONS"
    assert settings_values(tmp_path, name) == 5
    assert settings_values(tmp_path, name, SCORING_AGREEMENT_MINIMUM_SESSIONS="20") == 20


def test_go_tarsy_s_session_events_are_listened_to_unless_turned_off(tmp_path):
    assert settings_values(tmp_path, "settings.TARSY_SYNC_EVENTS") is True
    assert settings_values(tmp_path, "settings.TARSY_SYNC_EVENTS", TARSY_SYNC_EVENTS="false") is False


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DEBUG", "maybe", "DEBUG='maybe' is not a boolean (use true or false)"),
        ("SCORING_LLM_TIMEOUT_S", "soon", "SCORING_LLM_TIMEOUT_S='soon' is not a number"),
        ("SCORING_WORKERS", "2.5", "SCORING_WORKERS='2.5' is not a number"),
        ("TRUSTED_PROXY_IPS", "10.0.0.300", "TRUSTED_PROXY_IPS:"),
        ("TRUSTED_PROXY_HOPS", "0", "TRUSTED_PROXY_HOPS=0 is too small (at least 1)"),
        ("LOGIN_ACCOUNT_FAILURE_LIMIT", "0", "LOGIN_ACCOUNT_FAILURE_LIMIT=0 is too small (at least 1)"),
        ("SCORING_REPORT_RATE", "often", "SCORING_REPORT_RATE='often' is not a rate"),
        ("SCORING_REPORT_REUSE_S", "-1", "SCORING_REPORT_REUSE_S=-1 is too small (at least 0)"),
        ("SCORING_REPORT_SLOT_SHARE", "0", "SCORING_REPORT_SLOT_SHARE=0 is out of range (above 0,"),
        ("SCORING_REPORT_SLOT_SHARE", "1.5", "SCORING_REPORT_SLOT_SHARE=1.5 is out of range (above 0,"),
        ("SCORING_TRIAL_SLOT_SHARE", "0", "SCORING_TRIAL_SLOT_SHARE=0 is out of range (above 0,"),
        ("SCORING_JUDGE_SAMPLES", "three", "SCORING_JUDGE_SAMPLES='three' is not a number"),
        ("SCORING_JUDGE_SAMPLES", "0", "SCORING_JUDGE_SAMPLES=0 is out of range (from 1 to 10)"),
        ("SCORING_JUDGE_SAMPLES", "11", "SCORING_JUDGE_SAMPLES=11 is out of range (from 1 to 10)"),
        ("SCORING_UNSTABLE_SPREAD", "-1", "SCORING_UNSTABLE_SPREAD=-1 is out of range (from 0 to 100)"),
        ("SCORING_UNSTABLE_SPREAD", "101", "SCORING_UNSTABLE_SPREAD=101 is out of range (from 0 to 100)"),
        ("SCORING_BUDGET_USD_PER_DAY", "-1", "SCORING_BUDGET_USD_PER_DAY=-1 is too small (at least 0)"),
        ("SCORING_BUDGET_USD_PER_MONTH", "nan", "SCORING_BUDGET_USD_PER_MONTH=nan is not an amount"),
        (
            "SCORING_AGREEMENT_MINIMUM_SESSIONS", "0",
            "SCORING_AGREEMENT_MINIMUM_SESSIONS=0 is too small (at least 1)",
        ),
        ("SCORING_AUTO_SCORE_SHARES", "{half}", "SCORING_AUTO_SCORE_SHARES is not JSON:"),
        ("SCORING_AUTO_SCORE_SHARES", '{"alert_type": {}}', 'SCORING_AUTO_SCORE_SHARES must be a JSON object with only'),
        ("SCORING_AUTO_SCORE_SHARES", '{"chains": {"c": 1.5}}', 'SCORING_AUTO_SCORE_SHARES: "chains" "c" is 1.5, not a share'),
        ("SCORING_AUTO_SCORE_SHARES", '{"default": true}', 'SCORING_AUTO_SCORE_SHARES: "default" is True, not a share'),
    ],
)
def test_bad_values_stop_startup_with_a_clear_message(tmp_path, variable, value, message):
    process = load_settings(tmp_path, "settings.DEBUG", **{variable: value})

    assert process.returncode != 0
    assert f"django.core.exceptions.ImproperlyConfigured: {message}" in process.stderr


def test_one_judge_sample_by_default_and_the_sample_settings_are_read(tmp_path):
    assert settings_values(tmp_path, "settings.SCORING_JUDGE_SAMPLES, settings.SCORING_UNSTABLE_SPREAD") == [1, 15]
    assert settings_values(
        tmp_path,
        "settings.SCORING_JUDGE_SAMPLES, settings.SCORING_UNSTABLE_SPREAD",
        SCORING_JUDGE_SAMPLES="10",
        SCORING_UNSTABLE_SPREAD="0",
    ) == [10, 0]


def test_generated_secret_key_is_kept_private_and_reused(tmp_path):
    first = settings_values(tmp_path, "settings.SECRET_KEY")
    second = settings_values(tmp_path, "settings.SECRET_KEY")
    key_file = tmp_path / "secret_key"

    assert first == second == key_file.read_text()
    assert len(first) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_generated_secret_key_is_never_readable_by_others_even_briefly(tmp_path):
    """Every file in the var folder is watched at each audit event of the process
    that creates the key (each open, chmod, link, rename...): none is ever seen
    with permissions for the group or others, under the common umask 022."""
    code = """
        import os, stat, sys
        var_dir = os.environ["TARSY_SCORING_VAR_DIR"]
        seen, watching = {}, [False]

        def watch(event, args):
            if watching[0]:
                return
            watching[0] = True
            try:
                for entry in os.scandir(var_dir):
                    seen.setdefault(entry.name, set()).add(stat.S_IMODE(entry.stat().st_mode))
            except FileNotFoundError:
                pass
            finally:
                watching[0] = False

        os.umask(0o022)
        sys.addaudithook(watch)
        from django.conf import settings
        settings.SECRET_KEY
        watching[0] = True
        import json
        print(json.dumps({name: sorted(modes) for name, modes in seen.items()}))
    """
    var_dir = tmp_path / "var"
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        cwd=REPO_DIR,
        env={
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "tarsy_scoring.settings",
            "TARSY_SCORING_VAR_DIR": str(var_dir),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 0, process.stderr
    seen = json.loads(process.stdout)

    assert seen.get("secret_key") == [0o600]
    assert all(modes == [0o600] for modes in seen.values()), seen
    assert os.listdir(var_dir) == ["secret_key"]  # no draft left behind


def test_an_empty_secret_key_file_open_to_others_is_replaced_by_a_private_key(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.touch(mode=0o644)
    key_file.chmod(0o644)

    key = settings_values(tmp_path, "settings.SECRET_KEY")

    assert len(key) >= 50 and key == key_file.read_text()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_processes_starting_at_once_agree_on_one_generated_key(tmp_path):
    program = "from django.conf import settings; print(settings.SECRET_KEY)"
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "tarsy_scoring.settings"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", program],
            cwd=REPO_DIR,
            env={**env, "TARSY_SCORING_VAR_DIR": str(tmp_path)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    keys = {process.communicate(timeout=60)[0].strip() for process in processes}

    assert keys == {(tmp_path / "secret_key").read_text()}


def test_secret_key_from_the_environment_wins_and_writes_nothing(tmp_path):
    assert settings_values(tmp_path, "settings.SECRET_KEY", SECRET_KEY="from-env") == "from-env"
    assert not (tmp_path / "secret_key").exists()


def test_readme_configuration_table_lists_every_variable_the_settings_read():
    source = (REPO_DIR / "tarsy_scoring" / "settings.py").read_text()
    read = set(re.findall(r'os\.environ(?:\.get|\.setdefault)?[(\[]\s*"([A-Z][A-Z0-9_]+)"', source))
    read |= set(re.findall(r'env_(?:bool|number|optional_number|list|networks)\(\s*"([A-Z][A-Z0-9_]+)"', source))
    readme = (REPO_DIR / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", readme, flags=re.MULTILINE))

    assert "DATABASE_URL" in read and "SCORING_LLM_MODEL" in read
    assert read - documented == set()


def test_no_budget_and_every_session_sampled_by_default_and_the_cost_settings_are_read(tmp_path):
    names = "settings.SCORING_BUDGET_USD_PER_DAY, settings.SCORING_BUDGET_USD_PER_MONTH, settings.SCORING_AUTO_SCORE_SHARES"
    assert settings_values(tmp_path, names) == [None, None, {"default": 1.0, "alert_types": {}, "chains": {}}]
    assert settings_values(
        tmp_path,
        names,
        SCORING_BUDGET_USD_PER_DAY="2.5",
        SCORING_BUDGET_USD_PER_MONTH="none",
        SCORING_AUTO_SCORE_SHARES='{"alert_types": {"PodCrashLooping": 0.1}, "chains": {"k8s-chain": 0}}',
    ) == [2.5, None, {"default": 1.0, "alert_types": {"PodCrashLooping": 0.1}, "chains": {"k8s-chain": 0.0}}]
