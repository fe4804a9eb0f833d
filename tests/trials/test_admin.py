"""scoring/trials/admin.py: a candidate tried from its page (the sample's form, the dry run's
estimate to confirm, the trial started as estimated), the trial's page with its figures, a
running trial cancelled; who may do it; a version that is not a candidate refused, saying why."""

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse

from scoring.criteria import services as criteria_services
from scoring.models import Trial, TrialStatus
from scoring.trials import services as trials
from tests.support.criteria import criteria_text
from tests.support.trials import candidate, marked, reference_in, reviewed, run_all, scripted_judge

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]
SAMPLE = {"size": "30", "alert_type": "", "chain_id": "", "description": "Stricter on logs"}


def try_url(version) -> str:
    return reverse("admin:scoring_trial_try", args=[version.pk])


def trial_url(trial) -> str:
    return reverse("admin:scoring_trial_change", args=[trial.pk])


def cancel_url(trial) -> str:
    return reverse("admin:scoring_trial_cancel", args=[trial.pk])


def version_url(version) -> str:
    return reverse("admin:scoring_criteriaversion_change", args=[version.pk])


def last_message(response) -> str:
    """The message a redirect leaves (after those not yet shown of earlier redirects)."""
    return [str(message) for message in get_messages(response.wsgi_request)][-1]


def started(size=30) -> Trial:
    return trials.start_trial(trials.plan_trial(candidate_id=candidate().pk, size=size), created_by="carol")


def test_a_candidates_page_offers_to_try_it_and_no_other_versions_does(admin_client, shipped_criteria):
    version = candidate()
    draft = criteria_services.create_draft(criteria_text("Draft"), scope="global", scope_value="", created_by="c")

    assert "data-try-candidate" in admin_client.get(version_url(version)).content.decode()
    for other in (draft, shipped_criteria):
        assert "data-try-candidate" not in admin_client.get(version_url(other)).content.decode()


def test_a_candidate_is_tried_through_its_estimate_and_the_trial_started_is_the_sample_estimated(
    admin_client, judge_llm
):
    sessions = {str(marked(score).session_id) for score in (95, 85, 75, 60, 40, 25)}
    version = candidate()

    form = admin_client.get(try_url(version)).content.decode()
    assert 'name="size" value="30"' in form and "Any alert type" in form

    estimate = admin_client.post(try_url(version), SAMPLE)
    page = estimate.content.decode()
    assert estimate.status_code == 200 and not Trial.objects.exists()  # the dry run writes nothing
    assert re.search(r'data-estimate="sessions">6<', page)  # all six reviewed: fewer than asked for
    assert re.search(r'data-estimate="scorings">12 ', page)
    assert "unknown" in page  # the fake judge's model has no price
    assert re.search(r'data-estimate="would_fail">none<', page)
    shown = re.search(r'name="session_ids" value="([^"]+)"', page).group(1)
    assert set(shown.split(",")) == sessions
    marked(50)  # reviewed after the estimate: a new draw might take it, the trial does not

    response = admin_client.post(try_url(version), {**SAMPLE, "session_ids": shown, "start": "Start the trial"})

    trial = Trial.objects.get()
    assert response.status_code == 302 and response["Location"] == trial_url(trial)
    assert last_message(response) == "Trial started: 6 sessions, 12 scorings queued."
    assert (trial.candidate_id, trial.size) == (version.pk, 6)
    assert (trial.created_by, trial.description) == ("admin", "Stricter on logs")
    assert {str(s) for s in trial.scorings.values_list("session_id", flat=True)} == sessions

    scripted_judge(judge_llm, lambda prompt: reference_in(prompt) - 2, lambda prompt: 50)
    run_all()
    page = admin_client.get(trial_url(trial)).content.decode()
    figures = re.search(r'<tr data-figure="mean_abs_diff">.*?</tr>', page, re.S).group(0)
    assert re.search(r'data-n>6<', figures)
    assert re.search(r'data-arm="candidate">2\.0 <span class="muted ci" data-ci [^>]*>\[2\.0, 2\.0\]', figures)
    assert 'data-significant="yes"' in figures
    assert 'data-figure="mean_shift"' in page and "data-confusion=\"candidate\"" in page
    assert page.count("data-transcript-link") == 12
    assert "data-trial-cancel" not in page  # completed
    # The operator decides from the trial, on the candidate's own pages (which ask why).
    promote = reverse("admin:scoring_criteriaversion_state", args=[version.pk, "promote"])
    assert f'href="{promote}" data-decide="promote"' in page and 'data-decide="retire"' in page
    admin_client.post(promote, {"reason": "agrees with the reviewers"})
    assert 'data-decide="promote"' not in admin_client.get(trial_url(trial)).content.decode()


def test_the_estimate_says_the_cost_of_a_priced_model_and_a_size_out_of_range_is_asked_again(
    admin_client, settings
):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"  # litellm knows its window and price
    for score in (80, 30):
        reviewed(score)
    version = candidate()

    priced = admin_client.post(try_url(version), SAMPLE).content.decode()
    too_large = admin_client.post(try_url(version), {**SAMPLE, "size": "501"}).content.decode()

    assert re.search(r'data-estimate="cost">\$0\.\d{4}<', priced)
    assert "Ensure this value is less than or equal to 500." in too_large
    assert "data-trial-estimate" not in too_large and not Trial.objects.exists()


def test_a_version_that_is_not_a_candidate_is_refused_with_the_reason(admin_client, shipped_criteria):
    reviewed(70)
    draft = criteria_services.create_draft(criteria_text("Draft"), scope="global", scope_value="", created_by="c")

    for version in (draft, shipped_criteria):
        for response in (admin_client.get(try_url(version)), admin_client.post(try_url(version), SAMPLE)):
            assert response.status_code == 302 and response["Location"] == version_url(version)
            refused = f"Not tried: criteria version {version.pk} is {version.state}: only a candidate"
            assert last_message(response).startswith(refused)
    assert not Trial.objects.exists()


def test_a_candidate_with_nothing_reviewed_is_asked_again_saying_why(admin_client):
    page = admin_client.post(try_url(candidate()), SAMPLE).content.decode()

    assert "has a review of ours or a Go TARSy reviewer&#x27;s rating" in page
    assert 'data-trial-form' in page and not Trial.objects.exists()


def test_a_running_trial_is_cancelled_after_asking_and_only_once(admin_client):
    for score in (70, 40):
        reviewed(score)
    trial = started()

    assert "data-trial-cancel" in admin_client.get(trial_url(trial)).content.decode()
    asked = admin_client.get(cancel_url(trial)).content.decode()
    assert "fails the 4 waiting ones unasked" in asked
    assert Trial.objects.get().status == TrialStatus.RUNNING

    response = admin_client.post(cancel_url(trial))

    assert last_message(response) == "Trial cancelled: its waiting scorings will not run."
    assert Trial.objects.get().status == TrialStatus.CANCELLED
    assert set(trial.scorings.values_list("error_message", flat=True)) == {"trial cancelled by admin"}
    again = admin_client.post(cancel_url(trial))
    assert last_message(again) == f"Not cancelled: trial {trial.pk} is cancelled: only a running trial is cancelled."
    assert "data-trial-cancel" not in admin_client.get(trial_url(trial)).content.decode()


def test_below_the_minimum_the_page_says_too_few_reviews_and_why(admin_client, judge_llm):
    for score in (90, 20):
        marked(score)
    trial = started()
    scripted_judge(judge_llm, lambda prompt: 70, lambda prompt: 50)
    run_all()

    page = admin_client.get(trial_url(trial)).content.decode()

    assert "Some figures are withheld, too few reviews: 2 sessions, a figure needs at least 5." in page
    figures = re.search(r"<table class=\"figures\" data-trial-figures>.*?</table>", page, re.S).group(0)
    # Each figure's two arms and difference, and the mean shift.
    assert figures.count(">too few reviews</span>") == 3 * 3 + 1
    assert "data-ci" not in figures


def test_staff_start_and_cancel_and_others_reach_no_admin(client, judge_llm):
    reviewed(70)
    version = candidate()
    client.force_login(User.objects.create_user("vic", is_staff=True))  # staff, no permission of any kind
    assert client.get(reverse("admin:scoring_trial_changelist")).status_code == 200
    client.post(try_url(version), {**SAMPLE, "start": "Start the trial"})
    trial = Trial.objects.get()
    assert trial.created_by == "vic"
    client.post(cancel_url(trial))
    assert Trial.objects.get().status == TrialStatus.CANCELLED

    olga = User.objects.create_user("olga")
    olga.user_permissions.add(*criteria_services_permission())
    client.force_login(olga)  # may change criteria over the API, but is not staff: no admin
    for url in (reverse("admin:scoring_trial_changelist"), trial_url(trial), try_url(version)):
        assert client.get(url).status_code == 302 and "/admin/login/" in client.get(url)["Location"]
    client.post(try_url(version), {**SAMPLE, "start": "Start the trial"})
    assert Trial.objects.count() == 1


def criteria_services_permission():
    app_label, codename = criteria_services.CRITERIA_PERMISSION.split(".")
    return Permission.objects.filter(content_type__app_label=app_label, codename=codename)


def test_the_trials_list_shows_the_candidate_status_and_progress_and_nothing_is_added_or_deleted(admin_client):
    reviewed(70)
    trial = started()

    page = admin_client.get(reverse("admin:scoring_trial_changelist")).content.decode()

    assert f"v{trial.candidate_id}</a>" in page and "0 / 2 completed" in page and ">running<" in page.lower()
    assert admin_client.get(reverse("admin:scoring_trial_add")).status_code == 403
    assert admin_client.get(reverse("admin:scoring_trial_delete", args=[trial.pk])).status_code == 403
    version_page = admin_client.get(version_url(trial.candidate)).content.decode()
    assert f'href="{trial_url(trial)}"' in version_page  # the version lists its trials


def test_starting_judges_the_sessions_whose_estimate_was_shown(admin_client):
    for score in (90, 85, 80, 70, 65, 60, 45, 40, 30, 20):
        reviewed(score)
    version = candidate()
    page = admin_client.post(try_url(version), {**SAMPLE, "size": "4"}).content.decode()
    shown = re.search(r'name="session_ids" value="([^"]+)"', page).group(1)

    admin_client.post(try_url(version), {**SAMPLE, "size": "4", "session_ids": shown, "start": "Start the trial"})

    drawn = {str(s) for s in Trial.objects.get().scorings.values_list("session_id", flat=True)}
    assert len(drawn) == 4 and drawn == set(shown.split(","))
