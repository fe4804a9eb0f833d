"""The dashboard's trial pages (scoring/views.py): the list and a trial's page for any signed-in
user, with the figures as the admin shows them; a trial scoring's transcript for staff only; the
insights page leads to them."""

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scoring.models import Trial, TrialArm
from scoring.trials import services as trials
from tests.support.trials import candidate, marked, reference_in, reviewed, run_all, scripted_judge

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]
LIST_URL = reverse("scoring:trial-list")
ADMIN_LIST_URL = reverse("admin:scoring_trial_changelist")


def trial_page(trial) -> str:
    return reverse("scoring:trial-detail", args=[trial.pk])


def transcript_url(scoring) -> str:
    return reverse("scoring:trial-scoring-transcript", args=[scoring.trial_id, scoring.pk])


@pytest.fixture
def reader(client):
    """A signed-in user who is not staff."""
    client.force_login(User.objects.create_user("rhea"))
    return client


@pytest.fixture
def judged(judge_llm):
    """A completed trial of six sessions: the candidate two under each reviewer, the current
    criteria 50 for all."""
    for score in (95, 85, 75, 60, 40, 25):
        marked(score)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    scripted_judge(judge_llm, lambda prompt: reference_in(prompt) - 2, lambda prompt: 50)
    run_all()
    return trial


def test_the_pages_need_a_signed_in_user(client, judged):
    for url in (LIST_URL, trial_page(judged), transcript_url(judged.scorings.first())):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_list_shows_each_trial_with_its_progress_newest_first(reader):
    reviewed(70)
    older = trials.start_trial(trials.plan_trial(candidate_id=candidate("Older").pk), created_by="carol")
    newer = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="dave")
    trials.cancel_trial(older.pk, cancelled_by="dave")

    page = reader.get(LIST_URL).content.decode()

    assert page.index(trial_page(newer)) < page.index(trial_page(older))
    assert f"v{newer.candidate_id} <span" in page and "Running" in page and "Cancelled" in page
    assert "0 / 2" in page and "(2 failed)" in page


def test_the_lists_read_every_trials_progress_in_the_same_queries(reader, admin_client):
    reviewed(70)
    version = candidate()

    def queries(client, url) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    counted = {}
    for trials_made in (1, 4):
        while Trial.objects.count() < trials_made:
            trials.start_trial(trials.plan_trial(candidate_id=version.pk), created_by="carol")
        counted[trials_made] = (queries(reader, LIST_URL), queries(admin_client, ADMIN_LIST_URL))
    assert counted[1] == counted[4]
    assert "0 / 2 completed" in admin_client.get(ADMIN_LIST_URL).content.decode()


def test_with_no_trial_the_list_says_so(reader):
    assert "data-no-trials" in reader.get(LIST_URL).content.decode()


def test_a_trials_page_shows_its_figures_with_n_intervals_and_significance(reader, judged):
    page = reader.get(trial_page(judged)).content.decode()

    assert "Completed" in page and "12 of 12 scorings completed." in page
    rows = dict(re.findall(r'<tr data-figure="(\w+)">(.*?)</tr>', page, re.S))
    assert set(rows) == {"mean_abs_diff", "spearman_rho", "weighted_kappa", "mean_shift"}
    assert all(re.search(r"data-n>6<", row) for row in rows.values())
    candidate_mae = r'data-arm="candidate">2\.0 <span[^>]*data-ci[^>]*>\[2\.0, 2\.0\]'
    assert re.search(candidate_mae, rows["mean_abs_diff"])
    assert re.search(r'data-arm="current">—<', rows["spearman_rho"])  # every current total the same
    assert 'data-significant="yes"' in rows["mean_abs_diff"]
    shift = (93 + 83 + 73 + 58 + 38 + 23) / 6 - 50
    assert re.search(rf"data-difference>\+{shift:.1f} <span[^>]*data-ci", rows["mean_shift"])
    current = re.search(r'data-confusion="current">.*?</table>', page, re.S).group(0)
    weak_row = re.search(r"badge-weak\">Weak</span></td>(.*?)</tr>", current).group(1)
    # 50 is weak: the reviewers said 25 and 40 (poor), 60 (weak), 75, 85 and 95 (good).
    assert re.findall(r"<td data-label=\"Reviewers: \w+\">(\d+)</td>", weak_row) == ["2", "1", "3"]
    assert "data-largest-session" in page and reverse("scoring:session-detail", args=[
        judged.scorings.get(arm=TrialArm.CANDIDATE, total_score=93).session_id
    ]) in page  # 93 − 50, the largest difference, first
    assert page.count("staff only") == 12 and "data-transcript-link" not in page
    assert "unknown" in re.search(r"data-trial-costs>.*?</table>", page, re.S).group(0)  # no price


def test_a_trial_that_does_not_exist_is_a_404(reader):
    response = reader.get(reverse("scoring:trial-detail", args=["0" * 8 + "-0000-0000-0000-" + "0" * 12]))
    assert response.status_code == 404


def test_a_trial_scorings_transcript_is_for_staff(reader, judged):
    scoring = judged.scorings.get(arm=TrialArm.CANDIDATE, total_score=93)
    assert reader.get(transcript_url(scoring)).status_code == 403

    reader.force_login(User.objects.create_user("stan", is_staff=True))
    trial = reader.get(trial_page(judged)).content.decode()
    assert trial.count("data-transcript-link") == 12 and transcript_url(scoring) in trial
    page = reader.get(transcript_url(scoring)).content.decode()
    turn_one = re.search(
        r'data-transcript-message="user">.*?<pre class="transcript-text">(.*?)</pre>', page, re.S
    )
    assert turn_one.group(1).startswith("Candidate criteria.")  # what the candidate's judge was sent
    assert 'data-transcript-message="assistant"' in page and "93" in page
    other_trial = judged.scorings.model(pk=scoring.pk + 1000, trial_id=judged.pk)
    assert reader.get(transcript_url(other_trial)).status_code == 404


def test_a_pending_scoring_has_no_transcript_to_show(client):
    client.force_login(User.objects.create_user("stan", is_staff=True))
    reviewed(70)
    trial = trials.start_trial(trials.plan_trial(candidate_id=candidate().pk), created_by="carol")
    pending = trial.scorings.first()

    assert "not judged yet" in client.get(transcript_url(pending)).content.decode()
    assert client.get(trial_page(trial)).content.decode().count(">none</span>") == 2


def test_the_insights_page_leads_to_the_trials(reader):
    reviewed(70)  # a scored session: the page shows its figures
    page = reader.get(reverse("scoring:insights")).content.decode()
    assert f'href="{LIST_URL}"' in page
