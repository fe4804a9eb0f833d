"""GET /api/v1/scoring/agreement/: judge-human agreement, and our judge against Go TARSy's reviewers and
judge, over the insight filters."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scoring import services
from scoring.api import agreement as serializers
from scoring.insights.confidence import minimum_sessions
from tests.support.factories import make_go_session, make_score, make_session, proxy_client

pytestmark = pytest.mark.django_db
AGREEMENT_PATH = "/api/v1/scoring/agreement/"


def reviewed(total: int, reviewer_score: int, verdict: str, **session_fields):
    score = make_score(make_session(**session_fields), total_score=total, judge_model="gpt-4o")
    services.record_review(
        score_id=score.score_id,
        reviewer=User.objects.get_or_create(username="rita")[0],
        verdict=verdict,
        reviewer_score=reviewer_score,
    )
    return score


def test_agreement_per_judge_model_and_the_largest_differences():
    near = reviewed(80, 78, "agree")
    far = reviewed(30, 75, "disagree")
    for total in (10, 55, 95):
        reviewed(total, total, "agree")
    response = proxy_client("alice").get(AGREEMENT_PATH)
    assert response.status_code == 200
    answer = response.json()
    [group] = answer["groups"]
    figures = (group["judge_model"], group["n"], group["mean_abs_diff"], group["agree_share"])
    assert figures == ("gpt-4o", 5, 9.4, 0.8)
    assert (answer["minimum_n"], group["reviewed_sessions"], group["too_few_reviews"], group["reason"]) == (
        5, 5, False, None,
    )  # fmt: skip
    assert group["spearman_rho"] == 0.9  # ranks 4, 2, 1, 3, 5 against 4, 3, 1, 2, 5
    low, high = group["mean_abs_diff_ci"]
    assert 0 <= low < 9.4 < high <= 45
    assert set(group) == set(serializers.AgreementGroupSerializer().fields)
    differences = response.json()["largest_differences"]
    assert [(pair["score_id"], pair["session_id"], pair["difference"]) for pair in differences[:2]] == [
        (str(far.score_id), str(far.session_id), 45), (str(near.score_id), str(near.session_id), -2),
    ]  # fmt: skip


def test_below_the_minimum_a_figure_is_null_with_too_few_reviews_and_the_reason():
    reviewed(80, 78, "agree")
    reviewed(30, 75, "disagree")
    [group] = proxy_client("alice").get(AGREEMENT_PATH).json()["groups"]
    assert (group["n"], group["mean_abs_diff"], group["mean_abs_diff_ci"], group["spearman_rho"]) == (
        2, None, None, None,
    )  # fmt: skip
    assert group["too_few_reviews"] is True
    assert group["reason"] == "too few reviews: 2 sessions, a figure needs at least 5"


def test_the_filters_select_the_sessions():
    reviewed(80, 78, "agree", alert_type="disk")
    reviewed(30, 75, "disagree", alert_type="kubernetes")
    response = proxy_client("alice").get(AGREEMENT_PATH, {"alert_type": "disk", "since": "2025-12-01"})
    assert [pair["difference"] for pair in response.json()["largest_differences"]] == [-2]
    answer = proxy_client("alice").get(AGREEMENT_PATH, {"since": "2027-01-01"}).json()
    assert (answer["groups"], answer["largest_differences"]) == ([], [])
    assert (answer["tarsy_reviewers"]["groups"], answer["tarsy_judge"]["groups"]) == ([], [])


def go_session(total: int, rating: str, tarsy_total: int | None = None):
    make_score(make_go_session(rating, tarsy_total), total_score=total, judge_model="gpt-4o")


def test_our_judge_against_tarsys_reviewers_and_tarsys_judge():
    for total, rating, tarsy_total in [
        (20, "inaccurate", 30), (40, "inaccurate", 40), (76, "partially_accurate", 50),
        (80, "accurate", 90), (90, "accurate", 85), (70, "excellent", None),
    ]:  # fmt: skip
        go_session(total, rating, tarsy_total)
    answer = proxy_client("alice").get(AGREEMENT_PATH).json()

    reviewers = answer["tarsy_reviewers"]
    assert (reviewers["minimum_n"], reviewers["unknown_ratings"]) == (minimum_sessions(), {"excellent": 1})
    assert reviewers["mapping"][0] == {"band": "poor", "rating": "inaccurate"}
    [group] = reviewers["groups"]
    # Ranks 1-5 against the ratings' [1.5, 1.5, 3, 4.5, 4.5]: Σxy 9, Σx² 10, Σy² 9.
    assert (group["judge_model"], group["n"], group["spearman_rho"]) == ("gpt-4o", 5, 0.949)
    # Two inaccurate and two accurate: too few for the AUC; 76 partially accurate is good, not weak.
    figures = (group["auc_n"], group["auc"], group["mapping_agree_share"], group["too_few"])
    assert figures == (4, None, 0.8, ["auc"])
    assert (group["too_few_reviews"], group["reason"], group["auc_ci"]) == (
        True, "too few reviews: 4 sessions, a figure needs at least 5", None,
    )  # fmt: skip
    low, high = group["spearman_rho_ci"]
    assert low <= 0.949 <= high
    assert group["confusion"][0] == {"band": "poor", "inaccurate": 2, "partially_accurate": 0, "accurate": 0}
    assert group["ratings"] == {"accurate": 2, "partially_accurate": 1, "inaccurate": 2}

    [judge] = answer["tarsy_judge"]["groups"]
    assert (judge["tarsy_judge_model"], judge["tarsy_prompt_hash"], judge["n"]) == (
        "gemini-2.5-flash", "c" * 64, 5,
    )  # fmt: skip
    # Ours − TARSy's: −10, 0, 26, −10, 5; TARSy's ranks 1, 2, 3, 5, 4 (ρ = 1 − 6·2 / (5·24)).
    assert (judge["mean_abs_diff"], judge["mean_difference"], judge["spearman_rho"]) == (10.2, 2.2, 0.9)
    assert (judge["too_few"], judge["too_few_reviews"], judge["reason"]) == ([], False, None)
    low, high = judge["mean_difference_ci"]
    assert -10 <= low < 2.2 < high <= 26
    # The answer is what the schema says it is.
    assert set(answer) == set(serializers.AgreementSerializer().fields)
    assert set(reviewers) == set(serializers.TarsyReviewersAgreementSerializer().fields)
    assert set(group) == set(serializers.TarsyReviewersAgreementGroupSerializer().fields)
    assert set(judge) == set(serializers.TarsyJudgeAgreementGroupSerializer().fields)


def test_a_bad_filter_is_400_naming_it():
    response = proxy_client("alice").get(AGREEMENT_PATH, {"until": "tomorrow"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("until: ")


def test_anonymous_callers_are_401():
    assert APIClient().get(AGREEMENT_PATH).status_code == 401


def test_the_schema_documents_the_answer_filters_and_errors_with_examples():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    get = schema["paths"][AGREEMENT_PATH]["get"]
    assert set(get["responses"]) == {"200", "400", "401"}
    assert {parameter["name"] for parameter in get["parameters"]} >= {
        "since", "until", "alert_type", "chain_id", "prompt_hash",
    }  # fmt: skip
    for code in ("200", "400"):
        assert get["responses"][code]["content"]["application/json"]["examples"], code


def test_the_schema_documents_the_tarsy_figures_and_the_example_has_them_all():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    ok = schema["paths"][AGREEMENT_PATH]["get"]["responses"]["200"]["content"]["application/json"]
    [example] = [example["value"] for example in ok["examples"].values()]
    answer = components["Agreement"]["properties"]
    assert set(answer) == set(example) == {
        "minimum_n", "groups", "largest_differences", "tarsy_reviewers", "tarsy_judge",
    }  # fmt: skip
    parts = (
        ("", example), ("TarsyReviewers", example["tarsy_reviewers"]), ("TarsyJudge", example["tarsy_judge"]),
    )  # fmt: skip
    for name, part in parts:
        assert set(components[f"{name}Agreement"]["properties"]) == set(part), name
        group = components[f"{name}AgreementGroup"]["properties"]
        assert set(group) == set(part["groups"][0]), name
        assert all(field.get("description") for field in group.values() if "$ref" not in field), name
        assert "minimum_n" in group["too_few"]["description"]
        assert "minimum_n" in group["too_few_reviews"]["description"] and group["reason"]["nullable"]
        # Every figure carries its interval, declared beside it.
        figures = [field for field in group if f"{field}_ci" in group]
        assert len(figures) >= 3 and all(group[f"{field}_ci"]["maxItems"] == 2 for field in figures), name
    judge_figures = components["TarsyJudgeAgreementGroup"]["properties"]["too_few"]["items"]
    assert set(components[judge_figures["$ref"].rsplit("/", 1)[1]]["enum"]) == {
        "spearman_rho", "mean_abs_diff", "mean_difference",
    }  # fmt: skip
