"""score_sessions and cleanup_orphaned_scorings."""

import re
import time
import uuid

import pytest
from django.core.management import CommandError, call_command
from django_q.models import OrmQ

from scoring import services
from scoring.judge import conversation, fitting, injection
from scoring.models import AlertSession, ScoringStatus, SessionScore
from tests.support.criteria import criteria_text, make_current
from tests.support.factories import T0_US, make_score, make_session
from tests.support.long_sessions import with_long_tool_output
from tests.support.samples import SAMPLES_DIR, load

pytestmark = pytest.mark.django_db
DAY_US = 86_400_000_000


def run(*args, capsys) -> str:
    call_command("score_sessions", *args)
    return capsys.readouterr().out


@pytest.fixture
def sessions():
    """One session in each state a batch cares about."""
    return {
        "unscored": make_session(alert_type="kubernetes"),
        "current": make_score(make_session(alert_type="kubernetes")).session,
        "obsolete": make_score(make_session(alert_type="security"), prompt_hash="0" * 64).session,
        "failed": make_score(make_session(alert_type="kubernetes"), ScoringStatus.FAILED).session,
        "active": make_score(make_session(alert_type="kubernetes"), ScoringStatus.IN_PROGRESS).session,
        "unfinished": make_session(status="in_progress"),
        "old": make_session(started_at_us=T0_US - 30 * DAY_US),
    }


def new_scores(session) -> int:
    return SessionScore.objects.filter(session=session, status=ScoringStatus.PENDING).count()


def test_unscored_queues_only_never_scored_finished_sessions(sessions, capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        out = run("--unscored", capsys=capsys)
    assert "queued: 2" in out
    assert new_scores(sessions["unscored"]) == 1 and new_scores(sessions["old"]) == 1
    assert new_scores(sessions["unfinished"]) == 0 and new_scores(sessions["current"]) == 0
    assert OrmQ.objects.count() == 1  # one wake-up: a worker process claims up to its free slots
    assert SessionScore.objects.get(session=sessions["unscored"]).score_triggered_by.startswith("cli:")


def test_a_batch_wakes_one_worker_process_per_process_worth_of_scores(
    settings, capsys, django_capture_on_commit_callbacks
):
    settings.SCORING_CONCURRENCY_PER_WORKER = 2
    for _ in range(5):
        make_session()
    with django_capture_on_commit_callbacks(execute=True):
        out = run("--unscored", capsys=capsys)
    assert "queued: 5" in out
    assert OrmQ.objects.count() == 3


def test_obsolete_and_failed_are_rescored(sessions, capsys):
    out = run("--obsolete", "--failed", capsys=capsys)
    assert "queued: 2" in out
    assert new_scores(sessions["obsolete"]) == 1 and new_scores(sessions["failed"]) == 1
    assert SessionScore.objects.filter(session=sessions["obsolete"]).count() == 2  # history kept


def test_without_selectors_every_finished_session_is_requested(sessions, capsys):
    out = run(capsys=capsys)
    # unscored + old queued; current, obsolete and failed keep their score; active is in progress.
    assert out.strip() == "queued: 2, already scored: 3, in progress: 1, not scorable: 0"


def test_force_rescores_everything_selected_except_active_ones(sessions, capsys):
    out = run("--force", capsys=capsys)
    assert out.strip() == "queued: 5, already scored: 0, in progress: 1, not scorable: 0"


def test_since_and_alert_type_narrow_the_selection(sessions, capsys):
    assert "queued: 1" in run("--unscored", "--since", "2025-12-25", capsys=capsys)
    assert new_scores(sessions["old"]) == 0
    assert "queued: 1" in run("--obsolete", "--alert-type", "security", capsys=capsys)


def dry_run_rows(out: str) -> dict[str, list[str]]:
    """The dry run's rows by session id: prompt tokens, cut, cost (or "-", "would fail: ...")."""
    rows = {}
    for line in out.splitlines()[2:-1]:
        session_id, rest = line.split(maxsplit=1)
        rows[session_id] = [cell for cell in re.split(r"\s{2,}", rest.strip()) if cell]
    return rows


@pytest.fixture
def fixed_boundary_token(monkeypatch):
    """One boundary token for every prompt: a random one tokenizes to a different length, and
    fitting then cuts a long session at a different place, so the dry run's count and the test's
    own could differ by more than the token."""
    monkeypatch.setattr(injection, "new_boundary_token", lambda: "0123456789abcdef0123456789abcdef")


def test_dry_run_counts_each_session_under_the_criteria_that_would_judge_it(
    settings, capsys, fixed_boundary_token
):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"
    document = load(SAMPLES_DIR / "01_single_stage_react.json")
    shipped = services.ingest_session({**document, "chain_id": "db-chain"}, written_by="tarsy")[0]
    own = {**document, "chain_id": "k8s-chain", "session_id": str(uuid.uuid4())}
    on_chain = services.ingest_session(own, written_by="tarsy")[0]
    make_current("Chain", scope="chain", scope_value="k8s-chain")  # a score prompt of four lines

    rows = dry_run_rows(run("--dry-run", capsys=capsys))

    stored = AlertSession.objects.get(pk=on_chain.pk)  # as the dry run reads it (PostgreSQL orders JSON keys)
    fitted = conversation.score_prompt_fitter(stored, criteria_text("Chain"))(128_000)
    assert int(rows[str(on_chain.session_id)][0].replace(",", "")) == fitted.tokens
    shipped_tokens = int(rows[str(shipped.session_id)][0].replace(",", ""))
    assert shipped_tokens > fitted.tokens + 1_500  # EP-0028's prompt is about 2,700 tokens


def test_dry_run_lists_each_session_fitted_to_the_window_with_its_cost_without_queueing(
    settings, capsys, fixed_boundary_token
):
    settings.SCORING_LLM_MODEL = "openai/gpt-4o-mini"  # litellm knows its window (128,000) and price
    sample = SAMPLES_DIR / "01_single_stage_react.json"
    small = services.ingest_session(load(sample), written_by="tarsy")[0]
    long_document = {**with_long_tool_output(load(sample), 1_500_000), "session_id": str(uuid.uuid4())}
    large = services.ingest_session(long_document, written_by="tarsy")[0]

    out = run("--dry-run", capsys=capsys)

    lines = out.splitlines()
    assert lines[0] == (
        "would score 2 sessions with openai/gpt-4o-mini, whose context window is 128,000 tokens "
        "(litellm's model list)"
    )
    rows = dry_run_rows(out)
    tokens, cut, cost = rows[str(small.session_id)]
    assert cut == "no" and 1_000 < int(tokens.replace(",", "")) < fitting.prompt_room(128_000)
    assert float(cost.removeprefix("$")) > 0
    tokens, cut, cost = rows[str(large.session_id)]
    # As a scoring fits it, read as the dry run reads it (PostgreSQL orders JSON keys).
    fitted = conversation.score_prompt_fitter(AlertSession.objects.get(pk=large.pk))(128_000)
    assert int(tokens.replace(",", "")) == fitted.tokens
    assert fitted.tokens <= fitting.prompt_room(128_000) and fitted.coverage < 0.5
    assert re.fullmatch(r"yes: \d\d% kept, 1 cut", cut)
    assert float(cost.removeprefix("$")) > float(rows[str(small.session_id)][2].removeprefix("$"))
    assert lines[-1].startswith("in all: ~")
    assert "(the room kept for replies: none completed by this model yet); litellm's prices" in lines[-1]
    assert not SessionScore.objects.filter(status=ScoringStatus.PENDING).exists()


def test_dry_run_prices_replies_at_the_models_mean_and_says_when_it_has_no_price(settings, capsys):
    settings.SCORING_LLM_MODEL = "openai/local-judge"
    session = make_session()
    make_score(make_session(), judge_model="openai/local-judge", output_tokens=800)

    out = run("--dry-run", "--session", str(session.session_id), capsys=capsys)

    assert dry_run_rows(out)[str(session.session_id)][1:] == ["no", "unknown"]
    assert "est. cost unknown" in out
    assert "replies taken as 800 output tokens (the mean of 1 completed scores by this model)" in out


def test_session_selects_by_id_and_says_which_it_did_not_select(sessions, capsys):
    missing = "00000000-0000-0000-0000-000000000000"
    call_command(
        "score_sessions",
        *("--session", str(sessions["unscored"].session_id), "--session", str(sessions["unfinished"].session_id)),
        *("--session", missing),
    )

    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "queued: 1, already scored: 0, in progress: 0, not scorable: 0"
    assert new_scores(sessions["unscored"]) == 1 and new_scores(sessions["old"]) == 0
    assert f"{sessions['unfinished'].session_id}: not selected" in err and f"{missing}: not selected" in err


def test_a_session_that_is_no_id_is_a_clear_error():
    with pytest.raises(CommandError, match="--session 'abc' is not a session id"):
        call_command("score_sessions", "--session", "abc")


def test_bad_since_is_a_clear_error():
    with pytest.raises(CommandError, match="use a date"):
        call_command("score_sessions", "--since", "last tuesday")


def test_cleanup_fails_only_stale_active_scorings_by_default(settings, capsys):
    settings.SCORING_JOB_TIMEOUT_S = 60
    settings.SCORING_PENDING_TIMEOUT_S = 600
    now_us = time.time_ns() // 1000
    stale_running = make_score(make_session(), "in_progress", started_at_us=now_us - 61_000_000)
    live_running = make_score(make_session(), "in_progress", started_at_us=now_us - 10_000_000)
    stale_queued = make_score(make_session(), "pending", scored_at_us=now_us - 601_000_000)
    live_queued = make_score(make_session(), "pending", scored_at_us=now_us - 300_000_000)
    done = make_score(make_session(), "completed", started_at_us=now_us - 10**9)

    call_command("cleanup_orphaned_scorings")

    assert "orphaned scorings marked failed: 2" in capsys.readouterr().out
    states = {s.pk: (s.status, s.error_message) for s in SessionScore.objects.all()}
    assert states[stale_running.pk][0] == "failed" and "in progress for over 60 s" in states[stale_running.pk][1]
    assert states[stale_queued.pk][0] == "failed" and "queued for over 600 s" in states[stale_queued.pk][1]
    assert states[live_running.pk][0] == "in_progress" and states[live_queued.pk][0] == "pending"
    assert states[done.pk][0] == "completed"


def test_cleanup_all_fails_every_active_scoring(capsys):
    make_score(make_session(), "in_progress")
    make_score(make_session(), "pending")
    call_command("cleanup_orphaned_scorings", "--all")
    assert "marked failed: 2" in capsys.readouterr().out
    assert set(SessionScore.objects.values_list("status", flat=True)) == {"failed"}


@pytest.mark.parametrize("args", [["--all", "--older-than", "5"], ["--older-than", "-1"]])
def test_cleanup_rejects_contradictory_arguments(args):
    with pytest.raises(CommandError):
        call_command("cleanup_orphaned_scorings", *args)


def test_score_sessions_over_a_used_up_budget_needs_over_budget(settings, capsys):
    settings.SCORING_BUDGET_USD_PER_MONTH = 5
    make_score(make_session(), cost_usd="5", completed_at_us=services.now_us())
    session = make_session()

    with pytest.raises(CommandError, match=r"monthly scoring budget is used up .*; add --over-budget to score anyway"):
        run("--unscored", capsys=capsys)
    assert not session.scores.exists()

    assert run("--unscored", "--over-budget", capsys=capsys).startswith("queued: 1,")
