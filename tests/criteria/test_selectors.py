"""scoring/criteria/selectors.py: which version judges a session (alert type, then chain, then
global), current and obsolete per scope in Python and in SQL alike, a hash's texts."""

import itertools

import pytest

from scoring.criteria import selectors
from scoring.judge.prompts import PROMPT_HASH, SHIPPED_CRITERIA
from scoring.models import AlertSession, CriteriaChange, CriteriaVersion, SessionScore
from tests.support.criteria import criteria_text, make_current
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db

ALERT_TYPES = ("kubernetes", "database")
CHAINS = ("k8s-chain", "db-chain", "")


def test_the_narrowest_scope_with_a_current_version_judges_a_session():
    by_type = make_current("Type", scope="alert_type", scope_value="kubernetes")
    by_chain = make_current("Chain", scope="chain", scope_value="k8s-chain")
    current = selectors.current_criteria()

    assert current.hash_for("kubernetes", "k8s-chain") == by_type.prompt_hash  # the type is narrower
    assert current.hash_for("database", "k8s-chain") == by_chain.prompt_hash
    assert current.hash_for("database", "db-chain") == PROMPT_HASH
    assert current.hash_for("database", "") == PROMPT_HASH  # a session without a chain
    assert (
        selectors.version_for_session(make_session(alert_type="kubernetes", chain_id="db-chain")) == by_type
    )


def test_the_shipped_criteria_judge_when_no_global_version_is_stored():
    CriteriaChange.objects.all().delete()  # as a flushed test database has none
    CriteriaVersion.objects.all().delete()

    assert selectors.current_criteria().hash_for("kubernetes", "k8s-chain") == PROMPT_HASH
    assert selectors.criteria_of_hash(PROMPT_HASH) == SHIPPED_CRITERIA


def scored_grid() -> dict:
    """A completed score under each criteria, of a session of each alert type and chain."""
    hashes = [PROMPT_HASH, criteria_text("Type").prompt_hash, criteria_text("Chain").prompt_hash, "0" * 64]
    scores = {}
    for alert_type, chain_id, prompt_hash in itertools.product(ALERT_TYPES, CHAINS, hashes):
        session = make_session(alert_type=alert_type, chain_id=chain_id)
        scores[(alert_type, chain_id, prompt_hash)] = make_score(session, prompt_hash=prompt_hash)
    return scores


@pytest.mark.parametrize(
    "scopes",
    [
        [],
        [("alert_type", "kubernetes", "Type")],
        [("chain", "k8s-chain", "Chain")],
        [
            ("alert_type", "kubernetes", "Type"),
            ("chain", "k8s-chain", "Chain"),
            ("chain", "db-chain", "Type"),
        ],
        [("global", "", "Chain"), ("alert_type", "database", "Type")],
    ],
)
def test_the_list_filters_say_current_and_obsolete_as_each_session_resolves(scopes):
    for scope, value, name in scopes:
        make_current(name, scope=scope, scope_value=value)
    grid = scored_grid()
    current = selectors.current_criteria()
    expected = {
        score.score_id
        for (alert_type, chain_id, prompt_hash), score in grid.items()
        if current.is_current(prompt_hash, alert_type, chain_id)
    }
    assert 0 < len(expected) < len(grid)

    scores = SessionScore.objects.filter(pk__in=[score.score_id for score in grid.values()])
    assert set(scores.filter(selectors.criteria_q(obsolete=False)).values_list("pk", flat=True)) == expected
    assert set(scores.filter(selectors.criteria_q(obsolete=True)).values_list("pk", flat=True)) == (
        {score.score_id for score in grid.values()} - expected
    )
    sessions = AlertSession.objects.filter(latest_score_id__in=[score.score_id for score in grid.values()])
    current_sessions = sessions.filter(
        selectors.criteria_q(obsolete=False, field="latest_prompt_hash", session="")
    )
    assert set(current_sessions.values_list("latest_score_id", flat=True)) == expected
    annotated = selectors.with_criteria_current(scores)
    assert {score.pk for score in annotated if score.criteria_current} == expected


def test_a_hash_is_current_anywhere_when_some_scope_has_it():
    chain = make_current("Chain", scope="chain", scope_value="k8s-chain")

    assert selectors.is_current_anywhere(chain.prompt_hash) and selectors.is_current_anywhere(PROMPT_HASH)
    assert not selectors.is_current_anywhere("0" * 64)


def test_a_hash_reads_back_the_texts_that_make_it():
    version = make_current("Own", system_prompt="You are a strict reviewer.")

    assert selectors.criteria_of_hash(version.prompt_hash) == criteria_text(
        "Own", system_prompt="You are a strict reviewer."
    )
    assert selectors.criteria_of_hash("0" * 64) is None
