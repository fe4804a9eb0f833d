"""/api/v1/scoring/criteria/: versions listed and read by anyone signed in, written by staff or
the change_criteria permission; a draft made through the API, promoted for a chain, judges that
chain's sessions and makes their older scores obsolete."""

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from scoring.judge.prompts import PROMPT_HASH
from scoring.models import CriteriaChange, CriteriaState, CriteriaVersion
from tests.support.criteria import corrected, criteria_text
from tests.support.factories import make_score, make_session, proxy_client, run_next_scoring
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]
LIST = "/api/v1/scoring/criteria/"


def version_url(version_id, action: str = "") -> str:
    return f"{LIST}{version_id}" + (f"/{action}" if action else "")


def draft_body(name: str = "Chain", **fields) -> dict:
    criteria = criteria_text(name)
    return {
        "score_prompt": criteria.score_prompt,
        "followup_prompt": criteria.followup_prompt,
        "scope": "chain",
        "scope_value": "k8s-chain",
        "description": f"{name} criteria",
        **fields,
    }


@pytest.fixture
def writer() -> APIClient:
    """A user who is not staff, with the change_criteria permission."""
    User.objects.create_user("carol").user_permissions.add(Permission.objects.get(codename="change_criteria"))
    return proxy_client("carol")


def test_anyone_signed_in_lists_the_versions_with_state_scope_and_hash(operator_client, shipped_criteria):
    response = operator_client.get(LIST)

    assert response.status_code == 200
    [shipped] = response.json()["results"]
    assert shipped == {
        "version_id": shipped_criteria.pk,
        "state": "current",
        "scope": "global",
        "scope_value": "",
        "prompt_hash": PROMPT_HASH,
        "description": "The criteria shipped with the service.",
        "created_by": "migration 0028",
        "created_at": shipped["created_at"],
        "updated_at": shipped["updated_at"],
    }
    texts = operator_client.get(version_url(shipped_criteria.pk)).json()
    assert (
        texts["score_prompt"].startswith("You are a computer security expert")
        and texts["system_prompt"] == ""
    )
    assert [change["action"] for change in texts["changes"]] == ["create"]


@pytest.mark.parametrize("client_of", ["anonymous", "operator"])
def test_writing_needs_staff_or_the_permission(client_of, operator_client):
    client = {"anonymous": APIClient(), "operator": operator_client}[client_of]

    response = client.post(LIST, draft_body(), format="json")

    assert response.status_code == {"anonymous": 401, "operator": 403}[client_of]
    assert not CriteriaVersion.objects.exclude(prompt_hash=PROMPT_HASH).exists()


@pytest.mark.parametrize("who", ["staff", "permission"])
def test_staff_or_the_permission_create_a_draft(who, writer, admin_client):
    client = {"staff": admin_client, "permission": writer}[who]

    response = client.post(LIST, draft_body(), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["scope"], body["scope_value"]) == ("draft", "chain", "k8s-chain")
    assert body["prompt_hash"] == criteria_text("Chain").prompt_hash
    assert body["changes"][0]["changed_by"] == {"staff": "admin", "permission": "carol"}[who]


def test_texts_that_cannot_judge_are_refused_saying_why(writer):
    missing = writer.post(LIST, {"followup_prompt": "x"}, format="json")
    no_session = writer.post(LIST, draft_body(score_prompt="Judge it."), format="json")
    bad_scope = writer.post(LIST, draft_body(scope="global"), format="json")

    assert missing.status_code == 400 and missing.json()["score_prompt"] == ["This field is required."]
    assert (
        no_session.status_code == 400
        and "no {{SESSION_CONVERSATION}} placeholder" in no_session.json()["detail"]
    )
    assert (
        bad_scope.status_code == 400
        and "the global scope names no alert type or chain" in bad_scope.json()["detail"]
    )


def test_a_draft_is_edited_then_frozen_then_promoted_with_a_reason(writer):
    draft = writer.post(LIST, draft_body(), format="json").json()

    edited = writer.put(version_url(draft["version_id"]), draft_body("Stricter"), format="json")
    assert edited.status_code == 200 and edited.json()["prompt_hash"] == criteria_text("Stricter").prompt_hash
    assert writer.post(version_url(draft["version_id"], "promote"), {"reason": "x"}).status_code == 409
    assert writer.post(version_url(draft["version_id"], "candidate"), {}).json()["state"] == "candidate"
    frozen = writer.put(version_url(draft["version_id"]), draft_body("Other"), format="json")
    assert frozen.status_code == 409 and "only a draft's texts can change" in frozen.json()["detail"]
    unexplained = writer.post(version_url(draft["version_id"], "promote"), {"reason": ""})
    assert unexplained.status_code == 400 and "reason: say why" in unexplained.json()["detail"]

    promoted = writer.post(version_url(draft["version_id"], "promote"), {"reason": "agrees with reviewers"})

    assert promoted.status_code == 200 and promoted.json()["state"] == "current"
    change = promoted.json()["changes"][0]
    assert (change["action"], change["changed_by"], change["reason"]) == (
        "promote",
        "carol",
        "agrees with reviewers",
    )


def test_a_version_promoted_for_a_chain_judges_its_sessions_and_rolling_back_restores_the_global_one(
    writer, operator_client, judge_llm
):
    on_chain = make_session(chain_id="k8s-chain")
    elsewhere = make_session(chain_id="db-chain")
    make_score(elsewhere)
    before = make_score(make_session(chain_id="k8s-chain"))  # under the shipped criteria
    draft = writer.post(LIST, draft_body(candidate=True), format="json").json()
    writer.post(version_url(draft["version_id"], "promote"), {"reason": "the chain's own"})

    assert operator_client.post(f"/api/v1/scoring/sessions/{on_chain.session_id}/score").status_code == 202
    judge_llm.push(Reply(evaluated("Logical Flow: 12/25\n\n48")), Reply("1. kubectl-logs"))
    run_next_scoring()
    score = operator_client.get(f"/api/v1/scoring/sessions/{on_chain.session_id}/score").json()
    assert (score["prompt_hash"], score["current_prompt_used"]) == (draft["prompt_hash"], True)
    assert judge_llm.requests[0].messages[0]["content"].startswith("Chain criteria.\n")
    older = operator_client.get(f"/api/v1/scoring/sessions/{before.session_id}/score").json()
    assert (older["prompt_hash"], older["current_prompt_used"]) == (PROMPT_HASH, False)
    other = operator_client.get(f"/api/v1/scoring/sessions/{elsewhere.session_id}/score").json()
    assert other["current_prompt_used"] is True

    rolled = writer.post(
        f"{LIST}rollback", {"scope": "chain", "scope_value": "k8s-chain", "reason": "too harsh"}
    )

    assert rolled.status_code == 200
    assert (rolled.json()["action"], rolled.json()["restored_version_id"]) == ("rollback", None)
    again = operator_client.get(f"/api/v1/scoring/sessions/{on_chain.session_id}/score").json()
    assert again["current_prompt_used"] is False
    assert operator_client.get(f"/api/v1/scoring/sessions/{before.session_id}/score").json()[
        "current_prompt_used"
    ]
    assert CriteriaVersion.objects.get(pk=draft["version_id"]).state == CriteriaState.RETIRED
    assert CriteriaChange.objects.filter(action="rollback", changed_by="carol", reason="too harsh").exists()


def test_the_list_filters_by_state_and_scope(writer, operator_client):
    writer.post(LIST, draft_body(), format="json")

    assert [v["state"] for v in operator_client.get(LIST, {"state": "draft"}).json()["results"]] == ["draft"]
    assert [v["scope"] for v in operator_client.get(LIST, {"scope": "global"}).json()["results"]] == [
        "global"
    ]
    refused = operator_client.get(LIST, {"state": "live"})
    assert refused.status_code == 400 and refused.json()["detail"].startswith("state: must be one of draft")


def test_an_unknown_version_is_404(writer):
    assert writer.get(version_url(999999)).status_code == 404
    assert writer.post(version_url(999999, "promote"), {"reason": "x"}).status_code == 404


def test_the_endpoints_are_in_the_schema_with_examples():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]

    assert set(paths[LIST]) == {"get", "post"}
    assert set(paths[LIST + "{version_id}"]) == {"get", "put"}
    for action in ("candidate", "promote", "retire"):
        assert set(paths[LIST + "{version_id}/" + action]["post"]["responses"]) >= {
            "200",
            "400",
            "403",
            "404",
            "409",
        }
    assert "post" in paths[LIST + "rollback"]
    created = paths[LIST]["post"]["responses"]["201"]["content"]["application/json"]
    assert created["examples"]


# --- Calibration ------------------------------------------------------------------------------


def test_a_calibrated_candidate_built_through_the_api_judges_with_its_examples_once_promoted(
    writer, operator_client, shipped_criteria, judge_llm
):
    reviewed = corrected(90, 20, note="Concluded without reading a single log line.")
    judged = make_session()

    body = {"base_version_id": shipped_criteria.pk, "size": 3}
    response = writer.post(f"{LIST}calibrate", body, format="json")

    assert response.status_code == 201
    built = response.json()
    assert (built["state"], built["scope"], built["created_by"]) == ("candidate", "global", "carol")
    [example] = built["examples"]
    assert (example["session_id"], example["judge_score"], example["reviewer_score"]) == (
        str(reviewed.session_id), 90, 20,
    )  # fmt: skip
    assert example["excerpt"].startswith("## SESSION") and built["prompt_hash"] != PROMPT_HASH
    assert operator_client.get(version_url(built["version_id"])).json()["examples"] == built["examples"]
    writer.post(version_url(built["version_id"], "promote"), {"reason": "closer to the reviewers"})

    assert operator_client.post(f"/api/v1/scoring/sessions/{judged.session_id}/score").status_code == 202
    judge_llm.push(Reply(evaluated("Logical Flow: 12/25\n\n48")), Reply("1. kubectl-logs"))
    run_next_scoring()
    score = operator_client.get(f"/api/v1/scoring/sessions/{judged.session_id}/score").json()
    assert (score["prompt_hash"], score["current_prompt_used"]) == (built["prompt_hash"], True)
    sent = judge_llm.requests[0].messages[0]["content"]
    assert "### Example 1: the judge scored 90, the reviewer 20" in sent
    assert "Concluded without reading a single log line." in sent


def test_calibration_refuses_readers_a_missing_base_and_says_when_nothing_corrects_the_judge(
    writer, operator_client, shipped_criteria
):
    body = {"base_version_id": shipped_criteria.pk}

    assert operator_client.post(f"{LIST}calibrate", body, format="json").status_code == 403
    assert writer.post(f"{LIST}calibrate", {"base_version_id": 424242}, format="json").status_code == 404
    too_many = writer.post(f"{LIST}calibrate", {**body, "size": 13}, format="json")
    assert too_many.status_code == 400 and "size" in too_many.json()
    nothing = writer.post(f"{LIST}calibrate", body, format="json")
    assert nothing.status_code == 400
    assert nothing.json()["detail"].startswith("no review corrects the judge")
