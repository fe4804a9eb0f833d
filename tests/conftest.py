"""Shared fixtures. Each support module registers itself in pytest_plugins."""

import os

import pytest

# The test users that stand for TARSy's service account may store sessions; the
# tests of that rule (tests/api/test_session_writers.py) set their own. In the
# environment too, for the service processes that tests start.
TEST_SESSION_WRITERS = ["tarsy", "alice", "operator", "fault-suite"]
os.environ.setdefault("SESSION_WRITERS", ",".join(TEST_SESSION_WRITERS))

pytest_plugins = [
    "tests.support.api",
    "tests.support.factories",
    "tests.support.servers",
    "tests.support.fake_llm_fixtures",
    "tests.support.workers",
    "tests.support.browser",
    "tests.support.throttle",
    "tests.support.tarsy",
]


@pytest.fixture(autouse=True)
def session_writers(settings):
    settings.SESSION_WRITERS = TEST_SESSION_WRITERS
