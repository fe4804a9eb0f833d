import pytest

from scoring.insights.filters import InsightFilters
from scoring.insights.stability import unstable_scores
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db


def sampled(session, samples, *, unstable, **overrides):
    scores = [score for score in samples if score is not None]
    return make_score(
        session, score_samples=samples, score_spread=max(scores) - min(scores), unstable=unstable, **overrides
    )


def test_unstable_scores_are_the_newest_completed_ones_largest_spread_first():
    wide = sampled(make_session(), [40, 90, 62], unstable=True)
    narrow = sampled(make_session(), [62, 70, 85], unstable=True)
    sampled(make_session(), [60, 64, 70], unstable=False)
    make_score(make_session())  # one sample: never unstable
    replaced = make_session()
    sampled(replaced, [20, 95, 60], unstable=True, scored_at_us=1)
    sampled(replaced, [70, 72, 71], unstable=False)  # a re-score replaces the unstable one

    assert list(unstable_scores(InsightFilters())) == [wide, narrow]
    assert list(unstable_scores(InsightFilters(), limit=1)) == [wide]


def test_unstable_scores_follow_the_filters():
    database = sampled(make_session(alert_type="db"), [30, 80], unstable=True)
    sampled(make_session(alert_type="kubernetes"), [30, 90], unstable=True)

    assert list(unstable_scores(InsightFilters(alert_type="db"))) == [database]
