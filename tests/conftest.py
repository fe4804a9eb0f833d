"""Shared fixtures. Each support module registers itself in pytest_plugins."""

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
