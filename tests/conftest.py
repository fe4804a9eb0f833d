"""Shared fixtures. Each support module registers itself in pytest_plugins."""

import os

import pytest

pytest_plugins = [
    "tests.support.api",
    "tests.support.factories",
    "tests.support.servers",
    "tests.support.dashboard_clients",
    "tests.support.fake_llm_fixtures",
    "tests.support.local_model",
    "tests.support.workers",
    "tests.support.browser",
    "tests.support.throttle",
    "tests.support.tarsy",
    # The events stand-in first: the Go API's stand-in imports it.
    "tests.support.fake_tarsy_go_events",
    "tests.support.fake_tarsy_go",
    "tests.support.status_table",
    "tests.support.criteria",
]


def pytest_configure(config):
    # Imported here, once it is loaded as a plugin (so that pytest rewrites its asserts).
    from tests.support.servers import TEST_SESSION_WRITERS

    # Also for the processes that tests start without child_env (bin/topology).
    os.environ.setdefault("SESSION_WRITERS", ",".join(TEST_SESSION_WRITERS))


@pytest.fixture(autouse=True)
def no_announced_limits():
    """The provider's limits that one test's judge calls learned (scoring/judge/pacing.py) pace no other's."""
    from scoring.judge import pacing

    pacing.forget_announced_limits()
    yield
    pacing.forget_announced_limits()


@pytest.fixture(autouse=True)
def no_remembered_spend():
    """The month's spend that one test's budget checks read (scoring/budget.py) counts in no other's."""
    from scoring import budget

    budget.forget_earlier_days()
    yield
    budget.forget_earlier_days()


@pytest.fixture(autouse=True)
def session_writers(settings):
    from tests.support.servers import TEST_SESSION_WRITERS

    settings.SESSION_WRITERS = TEST_SESSION_WRITERS
