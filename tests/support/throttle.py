"""Each test starts with no request history in the rate limits.

The throttle counts requests in Django's cache, which lives as long as the test
process (local memory): without this, a suite that requests many scorings as
one user would be throttled by earlier tests.
"""

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def fresh_throttle_history():
    cache.clear()
