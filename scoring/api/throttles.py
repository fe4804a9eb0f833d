"""Rate limit on requesting scorings: each one may cost a judge conversation.

Per user, at ``SCORING_POST_RATE`` (settings; empty means no limit). Over the
limit the API answers 429 with ``Retry-After``. The request history is kept in
Django's cache, so the limit is per web process unless the cache is shared
(``REDIS_URL``).
"""

from django.conf import settings
from rest_framework.throttling import UserRateThrottle


class ScoreRequestThrottle(UserRateThrottle):
    scope = "score_request"

    def get_rate(self):
        # Read on each request (not from DRF's class-level settings) so that the
        # setting is the one in force.
        return settings.SCORING_POST_RATE or None
