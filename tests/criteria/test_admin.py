"""scoring/criteria/admin.py: drafts written (typed or uploaded) and shown against the current
version of their scope, a version's prompt previewed for a session, promotion and rollback as
one action each asking why; versions are never deleted, and only a draft is edited."""

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from scoring.criteria import services
from scoring.judge.prompts import PROMPT_HASH
from scoring.models import CriteriaChange, CriteriaState, CriteriaVersion, ScoreTranscript
from tests.support.criteria import corrected, criteria_text, make_current
from tests.support.factories import make_score, make_session

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]
ADD = reverse("admin:scoring_criteriaversion_add")


def change_url(version) -> str:
    return reverse("admin:scoring_criteriaversion_change", args=[version.pk])


def state_url(version, change: str) -> str:
    return reverse("admin:scoring_criteriaversion_state", args=[version.pk, change])


def form_data(name: str = "Chain", **fields) -> dict:
    criteria = criteria_text(name)
    return {
        "scope": "chain",
        "scope_value": "k8s-chain",
        "description": f"{name} criteria",
        "system_prompt": "",
        "score_prompt": criteria.score_prompt,
        "followup_prompt": criteria.followup_prompt,
        **fields,
    }


def draft(name: str = "Chain", scope: str = "chain", scope_value: str = "k8s-chain") -> CriteriaVersion:
    return services.create_draft(
        criteria_text(name), scope=scope, scope_value=scope_value, created_by="carol"
    )


def test_a_draft_is_written_in_the_admin_through_the_services(admin_client):
    response = admin_client.post(ADD, form_data())

    assert response.status_code == 302
    version = CriteriaVersion.objects.get(description="Chain criteria")
    assert (version.state, version.scope_label, version.created_by) == ("draft", "Chain k8s-chain", "admin")
    assert version.prompt_hash == criteria_text("Chain").prompt_hash
    assert CriteriaChange.objects.filter(version=version, action="create", changed_by="admin").exists()


def test_text_typed_in_a_browser_hashes_as_the_same_text_given_any_other_way(admin_client):
    criteria = criteria_text("Typed")
    typed = {
        name: getattr(criteria, name).replace("\n", "\r\n") for name in ("score_prompt", "followup_prompt")
    }

    admin_client.post(ADD, form_data(description="typed", **typed))  # as a browser sends a text box

    assert CriteriaVersion.objects.get(description="typed").prompt_hash == criteria.prompt_hash


def test_uploaded_files_replace_the_typed_texts(admin_client):
    criteria = criteria_text("Uploaded", system_prompt="Be strict.")
    files = {
        "score_file": SimpleUploadedFile("score.txt", (criteria.score_prompt + "\n").encode()),
        "followup_file": SimpleUploadedFile("followup.txt", criteria.followup_prompt.encode()),
        "system_file": SimpleUploadedFile("system.txt", b"Be strict.\r\n"),  # saved on Windows
    }

    admin_client.post(
        ADD, {**form_data(score_prompt="", followup_prompt="", description="uploaded"), **files}
    )

    assert CriteriaVersion.objects.get(description="uploaded").prompt_hash == criteria.prompt_hash


def test_texts_that_cannot_judge_stay_on_the_form_saying_why(admin_client):
    response = admin_client.post(ADD, form_data(score_prompt="Judge it.", scope_value=""))

    assert response.status_code == 200
    page = response.content.decode()
    assert "no {{SESSION_CONVERSATION}} placeholder" in page and "scope_value: name the chain" in page
    assert not CriteriaVersion.objects.exclude(prompt_hash=PROMPT_HASH).exists()


def test_a_draft_shows_its_differences_from_the_version_that_judges_its_scope(admin_client, shipped_criteria):
    version = draft()

    page = admin_client.get(change_url(version)).content.decode()

    assert f"Against v{shipped_criteria.pk} (global, current" in page
    assert '<span class="diff-add">+Chain criteria.</span>' in page
    assert '<span class="diff-del">-You are a computer security expert' in page
    assert 'data-state-change="candidate"' in page and 'data-state-change="retire"' in page


def test_a_drafts_edits_change_its_hash_and_are_recorded(admin_client):
    version = draft()

    admin_client.post(change_url(version), form_data("Edited", scope="global", scope_value=""))

    edited = CriteriaVersion.objects.get(pk=version.pk)
    assert edited.prompt_hash == criteria_text("Edited").prompt_hash
    assert edited.scope_label == "Chain k8s-chain"  # the scope is chosen once
    assert CriteriaChange.objects.filter(version=version, action="edit", changed_by="admin").exists()


def test_a_version_that_is_not_a_draft_is_read_only_and_none_is_deleted(admin_client, shipped_criteria):
    before = CriteriaVersion.objects.get(pk=shipped_criteria.pk).score_prompt

    page = admin_client.get(change_url(shipped_criteria)).content.decode()
    admin_client.post(change_url(shipped_criteria), form_data("Edited"))

    assert 'name="score_prompt"' not in page and "nothing to compare it with" in page
    assert CriteriaVersion.objects.get(pk=shipped_criteria.pk).score_prompt == before
    deleted = admin_client.get(reverse("admin:scoring_criteriaversion_delete", args=[shipped_criteria.pk]))
    assert deleted.status_code == 403


def test_the_prompt_is_previewed_for_a_chosen_session(admin_client):
    version = draft()
    session = make_session(chain_id="k8s-chain", alert_data={"alert": "PodCrashLooping"})
    url = reverse("admin:scoring_criteriaversion_preview", args=[version.pk])

    page = admin_client.get(url, {"session": str(session.session_id)}).content.decode()

    assert "Chain criteria." in page and "PodCrashLooping" in page
    assert "SESSION_DATA_" in page  # the session fenced in, as the judge gets it
    assert "You MUST end your response with a single line" in page
    assert "It is judged now by v" in page and "not by this version" in page
    assert "No session not-a-uuid." in admin_client.get(url, {"session": "not-a-uuid"}).content.decode()


def test_promotion_asks_why_shows_the_differences_and_is_one_action(admin_client):
    version = draft()
    services.make_candidate(version.pk, changed_by="carol")

    asked = admin_client.get(state_url(version, "promote")).content.decode()
    assert "Make it the current version of its scope" in asked and "diff-add" in asked
    unexplained = admin_client.post(state_url(version, "promote"), {"reason": ""}, follow=True)
    assert "reason: say why" in unexplained.content.decode()
    assert CriteriaVersion.objects.get(pk=version.pk).state == CriteriaState.CANDIDATE

    admin_client.post(state_url(version, "promote"), {"reason": "agrees with the reviewers"})

    assert CriteriaVersion.objects.get(pk=version.pk).state == CriteriaState.CURRENT
    change = CriteriaChange.objects.get(version=version, action="promote")
    assert (change.changed_by, change.reason) == ("admin", "agrees with the reviewers")


def test_rolling_back_says_what_becomes_current_and_does_it(admin_client, shipped_criteria):
    version = make_current("Stricter")

    asked = admin_client.get(state_url(version, "rollback")).content.decode()
    assert f"v{shipped_criteria.pk} ({PROMPT_HASH[:12]}) becomes current again." in asked

    admin_client.post(state_url(version, "rollback"), {"reason": "scores everyone 90"})

    assert CriteriaVersion.objects.get(pk=shipped_criteria.pk).state == CriteriaState.CURRENT
    assert CriteriaChange.objects.get(action="rollback").reason == "scores everyone 90"


def test_staff_write_as_the_api_lets_them_and_others_reach_no_admin(client):
    client.force_login(User.objects.create_user("vic", is_staff=True))  # no permission of any kind
    assert client.post(ADD, form_data("Staff")).status_code == 302
    assert CriteriaVersion.objects.get(description="Staff criteria").created_by == "vic"

    client.force_login(User.objects.create_user("olga"))
    assert client.get(reverse("admin:scoring_criteriaversion_changelist")).status_code == 302  # to sign in
    assert client.post(ADD, form_data("Other")).status_code == 302
    assert not CriteriaVersion.objects.filter(description="Other criteria").exists()


def test_a_versions_page_lists_the_scores_made_under_it_with_their_transcripts(
    admin_client, shipped_criteria
):
    kept = make_score(make_session(), total_score=70)
    ScoreTranscript.objects.create(
        score=kept, recorded_at_us=kept.scored_at_us, transcript={"conversations": []}
    )
    make_score(make_session(), prompt_hash="0" * 64)  # another hash's

    page = admin_client.get(change_url(shipped_criteria)).content.decode()

    assert "Scores under these criteria (1)" in page
    assert reverse("admin:scoring_sessionscore_change", args=[kept.score_id]) in page and ">kept</a>" in page
    searched = admin_client.get(reverse("admin:scoring_sessionscore_changelist"), {"q": PROMPT_HASH})
    assert str(kept.score_id)[:8] in searched.content.decode()


# --- Calibration ------------------------------------------------------------------------------

CHANGELIST = reverse("admin:scoring_criteriaversion_changelist")


def calibrate(client, *versions):
    return client.post(
        CHANGELIST,
        {"action": "build_calibrated_candidate", "_selected_action": [v.pk for v in versions]},
        follow=True,
    )


def test_the_action_builds_a_calibrated_candidate_whose_page_shows_its_examples(
    admin_client, shipped_criteria
):
    reviewed = corrected(90, 20, note="Concluded without reading a single log line.")

    response = calibrate(admin_client, shipped_criteria)

    built = CriteriaVersion.objects.get(state=CriteriaState.CANDIDATE)
    assert f"Built <a href=\"{change_url(built)}\">v{built.pk}</a>, a candidate with 1 worked examples" in (
        response.content.decode()
    )
    assert (built.created_by, built.examples[0]["session_id"]) == ("admin", str(reviewed.session_id))
    page = admin_client.get(change_url(built)).content.decode()
    assert "Worked examples" in page and "Concluded without reading a single log line." in page
    assert "the judge scored 90, the reviewer 20" in page


def test_the_action_wants_one_version_and_says_when_nothing_corrects_the_judge(
    admin_client, shipped_criteria
):
    two = calibrate(admin_client, shipped_criteria, draft())

    assert "Choose one version to calibrate." in two.content.decode()
    assert "No review corrects the judge" in calibrate(admin_client, shipped_criteria).content.decode()
    assert not CriteriaVersion.objects.filter(state=CriteriaState.CANDIDATE).exists()

