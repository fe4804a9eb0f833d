"""Criteria versions for the tests: texts that differ from the shipped ones, and versions made
current through the services, as an operator makes them."""

import importlib

import pytest
from django.contrib.auth.models import User

from scoring import services as scoring_services
from scoring.criteria import services
from scoring.judge.prompts import Criteria
from scoring.models import CriteriaChange, CriteriaVersion, SessionScore
from tests.support.factories import make_score, make_session


def criteria_text(name: str, system_prompt: str = "") -> Criteria:
    """Criteria of their own (their own hash), named so that a prompt shows which judged."""
    return Criteria(
        score_prompt=(
            f"{name} criteria.\n{{{{SESSION_CONVERSATION}}}}\nAlert:\n{{{{ALERT_DATA}}}}\n{{{{OUTPUT_SCHEMA}}}}"
        ),
        followup_prompt=f"{name} follow-up: which tools were missing?",
        system_prompt=system_prompt,
    )


def make_current(name: str, scope: str = "global", scope_value: str = "", **text) -> CriteriaVersion:
    """A version of ``criteria_text(name)`` made current in its scope: draft, candidate, promoted."""
    version = services.create_draft(
        criteria_text(name, **text), scope=scope, scope_value=scope_value, created_by="carol"
    )
    services.make_candidate(version.pk, changed_by="carol")
    return services.promote(version.pk, changed_by="carol", reason=f"{name} judges better")


@pytest.fixture
def shipped_criteria(db) -> CriteriaVersion:
    """The current global version the migration seeds, seeded again when a transactional test
    emptied the tables before this test (migration 0028's own seed)."""
    seeded = CriteriaVersion.objects.filter(state="current", scope="global").first()
    if seeded is None:
        migration = importlib.import_module("scoring.migrations.0028_criteria_versions")
        migration.seed_shipped(CriteriaVersion, CriteriaChange)
        seeded = CriteriaVersion.objects.get(state="current", scope="global")
    return seeded


def corrected(
    total: int, reviewer_score: int, note: str = "Missed the pod logs.", reviewer: str = "rita", **session
) -> SessionScore:
    """A completed score of a new session (``session``: its fields) with the judge's ``total``,
    reviewed by ``reviewer`` at ``reviewer_score`` with ``note``; the score."""
    score = make_score(make_session(**session), total_score=total)
    scoring_services.record_review(
        score_id=score.score_id,
        reviewer=User.objects.get_or_create(username=reviewer)[0],
        verdict="agree" if total == reviewer_score else "disagree",
        reviewer_score=reviewer_score,
        note=note,
    )
    return score
