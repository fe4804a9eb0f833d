"""Property-based requests against every operation of our OpenAPI schema (schemathesis).

Each operation gets a bounded number of generated requests, valid and invalid,
signed in through the trusted-proxy header from loopback. No answer may be a
5xx, and every answer must match the schema: its status code, content type,
body and headers.
"""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

from tests.support.factories import make_score, make_session

MAX_EXAMPLES = 30


# Loaded when the module is imported (pytest-django has set Django up by then):
# schemathesis's fixture-based loader does not work with the pytest in use.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture
def server_url(live_server) -> str:
    """A live server (a real HTTP round trip), with a scored session to find."""
    make_score(make_session())
    return live_server.url


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)
def test_every_operation_answers_within_its_schema(case, server_url):
    response = case.call(base_url=server_url, headers={"X-Forwarded-User": "fuzzer"})
    case.validate_response(response)
