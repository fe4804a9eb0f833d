"""Human review of judge scores: the service's rules and the admin form that uses it."""

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.db import IntegrityError, transaction
from django.urls import reverse

from scoring import services
from scoring.models import ReviewVerdict, ScoreReview, SessionScore
from tests.support.factories import make_score, make_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer():
    return User.objects.create_user("rita", password="pw")


@pytest.fixture
def score():
    return make_score(make_session(), total_score=82)


def judge_output(score) -> tuple:
    return SessionScore.objects.values_list(
        "status", "total_score", "score_analysis", "missing_tools_analysis", "prompt_hash"
    ).get(pk=score.pk)


def test_a_review_is_kept_beside_the_judges_output(score, reviewer):
    before = judge_output(score)
    review = services.record_review(
        score_id=score.score_id,
        reviewer=reviewer,
        verdict="disagree",
        reviewer_score=40,
        note="  Missed the logs.  ",
    )
    assert (review.score_id, review.reviewer, review.verdict, review.reviewer_score, review.note) == (
        score.score_id, reviewer, ReviewVerdict.DISAGREE, 40, "Missed the logs.",
    )  # fmt: skip
    assert review.created_at is not None
    assert judge_output(score) == before


def test_every_review_is_kept(score, reviewer):
    services.record_review(score_id=score.score_id, reviewer=reviewer, verdict="agree", reviewer_score=80)
    services.record_review(score_id=score.score_id, reviewer=reviewer, verdict="disagree", reviewer_score=60)
    assert sorted(score.reviews.values_list("verdict", flat=True)) == ["agree", "disagree"]


@pytest.mark.parametrize("status", ["pending", "in_progress", "failed"])
def test_only_completed_scores_can_be_reviewed(status, reviewer):
    unfinished = make_score(make_session(), status=status)
    with pytest.raises(services.ReviewRejected, match=f"is {status}; only completed scores can be reviewed"):
        services.record_review(
            score_id=unfinished.score_id, reviewer=reviewer, verdict="agree", reviewer_score=50
        )
    assert not ScoreReview.objects.exists()


@pytest.mark.parametrize(
    ("verdict", "reviewer_score", "message"),
    [
        ("maybe", 50, "verdict must be one of agree, disagree"),
        ("agree", 101, "from 0 to 100"),
        ("agree", -1, "from 0 to 100"),
        ("agree", "50", "from 0 to 100"),
        ("agree", True, "from 0 to 100"),
    ],
)
def test_bad_reviews_are_refused_saying_why(score, reviewer, verdict, reviewer_score, message):
    with pytest.raises(services.ReviewRejected, match=message):
        services.record_review(
            score_id=score.score_id, reviewer=reviewer, verdict=verdict, reviewer_score=reviewer_score
        )


def test_edges_of_the_score_range_are_accepted(score, reviewer):
    for value in (0, 100):
        services.record_review(
            score_id=score.score_id, reviewer=reviewer, verdict="agree", reviewer_score=value
        )
    assert score.reviews.count() == 2


def test_unknown_score_and_anonymous_reviewer_are_refused(score, reviewer):
    with pytest.raises(services.ReviewRejected, match="not found"):
        services.record_review(
            score_id="00000000-0000-0000-0000-000000000000",
            reviewer=reviewer,
            verdict="agree",
            reviewer_score=1,
        )
    with pytest.raises(services.ReviewRejected, match="signed-in reviewer"):
        services.record_review(
            score_id=score.score_id, reviewer=AnonymousUser(), verdict="agree", reviewer_score=1
        )


def test_the_database_refuses_out_of_range_reviewer_scores(score, reviewer):
    with pytest.raises(IntegrityError), transaction.atomic():
        ScoreReview.objects.create(score=score, reviewer=reviewer, verdict="agree", reviewer_score=101)


# --- The admin's review form ---


def review_url(score) -> str:
    return reverse("admin:scoring_sessionscore_review", args=[score.score_id])


def score_page(score) -> str:
    return reverse("admin:scoring_sessionscore_change", args=[score.score_id])


def test_admin_records_a_disagreement_and_shows_it(admin_client, admin_user, score):
    page = admin_client.get(score_page(score)).content.decode()
    assert 'value="Record review"' in page

    response = admin_client.post(
        review_url(score),
        {"verdict": "disagree", "reviewer_score": "35", "note": "Never read the pod logs."},
        follow=True,
    )
    review = ScoreReview.objects.get()
    assert (review.reviewer, review.verdict, review.reviewer_score) == (admin_user, "disagree", 35)
    text = response.content.decode()
    assert "Your review (disagree, 35) was recorded." in text
    assert "Never read the pod logs." in text
    assert SessionScore.objects.get(pk=score.pk).total_score == 82


def test_admin_refuses_an_invalid_review_with_the_reason(admin_client, score):
    response = admin_client.post(
        review_url(score), {"verdict": "disagree", "reviewer_score": "140"}, follow=True
    )
    assert "Review not recorded: reviewer_score:" in response.content.decode()
    assert not ScoreReview.objects.exists()


def test_failed_scores_offer_no_review_form_and_refuse_one(admin_client):
    failed = make_score(make_session(), status="failed")
    assert 'value="Record review"' not in admin_client.get(score_page(failed)).content.decode()
    response = admin_client.post(
        review_url(failed), {"verdict": "agree", "reviewer_score": "50"}, follow=True
    )
    assert "only completed scores can be reviewed" in response.content.decode()


def test_reviewing_needs_the_add_review_permission(client, score):
    viewer = User.objects.create_user("vic", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_sessionscore"))
    client.force_login(viewer)
    assert 'value="Record review"' not in client.get(score_page(score)).content.decode()
    response = client.post(review_url(score), {"verdict": "agree", "reviewer_score": "80"}, follow=True)
    assert "You may not review scores" in response.content.decode()
    assert not ScoreReview.objects.exists()

    viewer.user_permissions.add(Permission.objects.get(codename="add_scorereview"))
    client.post(review_url(score), {"verdict": "agree", "reviewer_score": "80"})
    assert ScoreReview.objects.get().reviewer == viewer


def test_review_url_takes_only_post(admin_client, score):
    assert admin_client.get(review_url(score)).status_code == 405
