"""POST/GET /api/v1/scoring/scores/{score_id}/reviews: people's reviews of a judge's score."""

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.test import APIClient

from scoring.models import REVIEW_NOTE_MAX_CHARS, ScoreReview, ScoringStatus, SessionScore
from tests.support.factories import make_score, make_session, proxy_client

pytestmark = pytest.mark.django_db
REVIEWS_PATH = "/api/v1/scoring/scores/{score_id}/reviews"


def url(score_id) -> str:
    return REVIEWS_PATH.format(score_id=score_id)


def reviewer_client(username: str = "rita") -> APIClient:
    """A proxy-signed-in user with the admin's review permission."""
    user = User.objects.create_user(username)
    user.user_permissions.add(Permission.objects.get(codename="add_scorereview"))
    return proxy_client(username)


def review(client: APIClient, score_id, verdict: str, reviewer_score, **note):
    body = {"verdict": verdict, "reviewer_score": reviewer_score, **note}
    return client.post(url(score_id), body, format="json")


@pytest.fixture
def score() -> SessionScore:
    return make_score(make_session(), total_score=82)


def judge_output(score) -> tuple:
    return SessionScore.objects.values_list("status", "total_score", "score_analysis").get(pk=score.pk)


# --- Recording a review ---------------------------------------------------------------------


def test_a_reviewer_records_a_review_beside_the_judges_output(score):
    before = judge_output(score)
    body = {"verdict": "disagree", "reviewer_score": 45, "note": "  Never read the pod logs.  "}
    response = reviewer_client().post(url(score.score_id), body, format="json")
    assert response.status_code == 201
    stored = ScoreReview.objects.get()
    assert response.json() == {
        "review_id": stored.id,
        "score_id": str(score.score_id),
        "reviewer": "rita",
        "verdict": "disagree",
        "reviewer_score": 45,
        "note": "Never read the pod logs.",
        "created_at": response.json()["created_at"],
    }
    assert (stored.reviewer.username, stored.verdict, stored.reviewer_score) == ("rita", "disagree", 45)
    assert judge_output(score) == before


def test_the_note_is_optional_and_every_review_is_kept(score):
    client = reviewer_client()
    for verdict, value in (("agree", 80), ("disagree", 60)):
        response = review(client, score.score_id, verdict, value)
        assert response.status_code == 201 and response.json()["note"] == ""
    assert score.reviews.count() == 2


def test_reviewing_needs_the_admins_review_permission(score):
    response = review(proxy_client("alice"), score.score_id, "agree", 80)
    assert response.status_code == 403
    assert "scoring.add_scorereview" in response.json()["detail"]
    assert not ScoreReview.objects.exists()


def test_the_permission_may_come_from_a_group(score):
    reviewers = Group.objects.create(name="reviewers")
    reviewers.permissions.add(Permission.objects.get(codename="add_scorereview"))
    User.objects.create_user("gus").groups.add(reviewers)
    response = review(proxy_client("gus"), score.score_id, "agree", 80)
    assert response.status_code == 201


def test_anonymous_callers_are_401(score):
    for response in (review(APIClient(), score.score_id, "agree", 80), APIClient().get(url(score.score_id))):
        assert response.status_code == 401
    assert not ScoreReview.objects.exists()


@pytest.mark.parametrize("status", [ScoringStatus.PENDING, ScoringStatus.IN_PROGRESS, ScoringStatus.FAILED])
def test_only_completed_scores_can_be_reviewed(status):
    unfinished = make_score(make_session(), status=status)
    response = review(reviewer_client(), unfinished.score_id, "agree", 50)
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"score {unfinished.score_id} is {status}; only completed scores can be reviewed"
    }


@pytest.mark.parametrize(
    ("score_id", "detail"),
    [
        ("00000000-0000-0000-0000-000000000000", "No score with id 00000000-0000-0000-0000-000000000000."),
        ("not-a-uuid", "No score with id 'not-a-uuid': score ids are UUIDs"),
    ],
)
def test_an_unknown_score_is_404_on_both_methods(score_id, detail):
    client = reviewer_client()
    for response in (
        review(client, score_id, "agree", 50),
        client.get(url(score_id)),
    ):
        assert response.status_code == 404
        assert response.json()["detail"].startswith(detail)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"verdict": "maybe", "reviewer_score": 50}, "verdict"),
        ({"verdict": "agree", "reviewer_score": 101}, "reviewer_score"),
        ({"verdict": "agree", "reviewer_score": -1}, "reviewer_score"),
        ({"verdict": "agree", "reviewer_score": "high"}, "reviewer_score"),
        ({"verdict": "agree"}, "reviewer_score"),
        ({"reviewer_score": 50}, "verdict"),
    ],
)
def test_a_bad_body_is_400_naming_the_field(score, body, field):
    response = reviewer_client().post(url(score.score_id), body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"{field}: ")
    assert field in response.json()
    assert not ScoreReview.objects.exists()


# --- Reading the reviews --------------------------------------------------------------------


def test_anyone_signed_in_reads_a_scores_reviews_newest_first(score):
    client = reviewer_client()
    review(client, score.score_id, "agree", 80)
    review(client, score.score_id, "disagree", 60, note="On reflection")
    review(client, make_score(make_session()).score_id, "agree", 61)
    response = proxy_client("alice").get(url(score.score_id))
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(row["verdict"], row["reviewer_score"], row["note"]) for row in rows] == [
        ("disagree", 60, "On reflection"), ("agree", 80, ""),
    ]  # fmt: skip
    assert {row["reviewer"] for row in rows} == {"rita"}


def test_the_reviews_come_50_a_page(score):
    rita = User.objects.create_user("rita")
    ScoreReview.objects.bulk_create(
        ScoreReview(score=score, reviewer=rita, verdict="agree", reviewer_score=value) for value in range(60)
    )
    client = proxy_client("alice")

    first = client.get(url(score.score_id)).json()
    second = client.get(first["next"]).json()

    assert (first["count"], len(first["results"]), first["previous"]) == (60, 50, None)
    assert (len(second["results"]), second["next"]) == (10, None)
    assert {row["review_id"] for row in first["results"] + second["results"]} == set(
        ScoreReview.objects.values_list("id", flat=True)
    )


def test_a_score_nobody_reviewed_has_an_empty_list(score):
    response = proxy_client("alice").get(url(score.score_id))
    assert response.status_code == 200
    assert response.json() == {"count": 0, "next": None, "previous": None, "results": []}


def test_a_note_over_10_000_characters_is_refused_naming_the_field(score):
    too_long = "x" * (REVIEW_NOTE_MAX_CHARS + 1)
    response = review(reviewer_client(), score.score_id, "disagree", 40, note=too_long)

    assert response.status_code == 400
    assert response.json()["note"] == ["Ensure this field has no more than 10000 characters."]
    assert not ScoreReview.objects.exists()


# --- The schema -----------------------------------------------------------------------------


def test_the_schema_documents_both_operations_with_examples():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operations = schema["paths"][REVIEWS_PATH]
    assert set(operations["post"]["responses"]) == {"201", "400", "401", "403", "404"}
    assert set(operations["get"]["responses"]) == {"200", "401", "404"}
    assert operations["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert operations["post"]["responses"]["201"]["content"]["application/json"]["examples"]
    assert operations["get"]["responses"]["200"]["content"]["application/json"]["examples"]

