"""The scoring schema as the database holds it (EP-0028, Phase 1: "Database Schema & Models").

bin/test runs these on SQLite and on PostgreSQL: the constraints must be
enforced by the database itself, not by Django's validation.
"""

import uuid
from decimal import Decimal

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from scoring.judge import replies
from scoring.judge.prompts import (
    JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS,
    JUDGE_PROMPT_SCORE,
    PROMPT_HASH,
    Criteria,
)
from scoring.judge.replies import DIMENSIONS
from scoring.models import ScoringStatus
from tests.support.factories import make_score, make_session


def scoring_tables() -> set[str]:
    return {model._meta.db_table for model in apps.get_app_config("scoring").get_models()}


def tables_in_database() -> set[str]:
    return set(connection.introspection.table_names())


def session_scores_constraints() -> dict[str, dict]:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, "session_scores")


@pytest.mark.django_db(transaction=True)
def test_scoring_migrates_to_zero_and_forward_again():
    assert scoring_tables() <= tables_in_database()

    call_command("migrate", "scoring", "zero", verbosity=0)
    try:
        assert scoring_tables() & tables_in_database() == set()
    finally:
        call_command("migrate", "scoring", verbosity=0)

    assert scoring_tables() <= tables_in_database()
    # The rebuilt tables work, constraints included.
    session = make_session()
    make_score(session, status=ScoringStatus.PENDING)
    with pytest.raises(IntegrityError), transaction.atomic():
        make_score(session, status=ScoringStatus.IN_PROGRESS)


@pytest.mark.django_db
@pytest.mark.parametrize("second_status", [ScoringStatus.PENDING, ScoringStatus.IN_PROGRESS])
@pytest.mark.parametrize("first_status", [ScoringStatus.PENDING, ScoringStatus.IN_PROGRESS])
def test_database_refuses_a_second_active_scoring_of_a_session(first_status, second_status):
    session = make_session()
    make_score(session, status=first_status)

    with pytest.raises(IntegrityError), transaction.atomic():
        make_score(session, status=second_status)

    assert session.scores.count() == 1


@pytest.mark.django_db
def test_finished_scorings_sit_beside_the_one_active_scoring():
    session = make_session()
    make_score(session, status=ScoringStatus.COMPLETED)
    make_score(session, status=ScoringStatus.FAILED)
    make_score(session, status=ScoringStatus.COMPLETED)
    make_score(session, status=ScoringStatus.PENDING)
    # Another session's active scoring is independent.
    make_score(make_session(), status=ScoringStatus.IN_PROGRESS)

    assert sorted(session.scores.values_list("status", flat=True)) == [
        "completed",
        "completed",
        "failed",
        "pending",
    ]


@pytest.mark.django_db
def test_a_session_can_be_scored_again_once_its_active_scoring_finished():
    session = make_session()
    active = make_score(session, status=ScoringStatus.IN_PROGRESS)
    active.status = ScoringStatus.COMPLETED
    active.total_score = 70
    active.save()

    make_score(session, status=ScoringStatus.PENDING)

    assert session.scores.filter(status__in=ScoringStatus.active_values()).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("fields", [{"total_score": 101}, {"total_score": -1}, {"status": "cancelled"}])
def test_database_refuses_out_of_range_scores_and_unknown_statuses(fields):
    session = make_session()
    with pytest.raises(IntegrityError), transaction.atomic():
        make_score(session, **fields)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "columns",
    [
        ["session_id"],
        ["prompt_hash"],
        ["total_score"],
        ["status"],
        ["session_id", "status"],
        ["status", "started_at_us"],
    ],
)
def test_session_scores_has_the_spec_indexes(columns):
    indexed = [info["columns"] for info in session_scores_constraints().values() if info["index"]]
    assert columns in indexed


@pytest.mark.django_db
def test_active_scoring_uniqueness_is_a_unique_index_on_session_id():
    constraint = session_scores_constraints()["uq_session_scores_one_active"]
    assert constraint["unique"] is True
    assert constraint["columns"] == ["session_id"]


@pytest.mark.django_db(transaction=True)
def test_migrating_copies_each_sessions_newest_score_onto_it():
    before, after = [("scoring", "0006_event_publish_failed")], [("scoring", "0007_session_latest_score")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        sessions, scores = old.get_model("scoring", "AlertSession"), old.get_model("scoring", "SessionScore")
        scored, never = (
            sessions.objects.create(
                session_id=uuid.uuid4(), alert_type="k", status="completed", started_at_us=1
            )
            for _ in range(2)
        )
        common = {"session": scored, "score_triggered_by": "bob", "started_at_us": 1}
        scores.objects.create(
            **common, prompt_hash="a" * 64, scored_at_us=1, status="completed", total_score=10
        )
        newest = scores.objects.create(
            **common, prompt_hash="b" * 64, scored_at_us=2, status="completed", total_score=88
        )
        scores.objects.create(**common, prompt_hash="c" * 64, scored_at_us=0, status="failed")

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        migrated = executor.loader.project_state(after).apps.get_model("scoring", "AlertSession")
        columns = ("latest_score_id", "latest_status", "latest_total_score", "latest_prompt_hash")

        assert migrated.objects.values_list(*columns).get(pk=scored.pk) == (
            newest.pk,
            "completed",
            88,
            "b" * 64,
        )
        assert migrated.objects.values_list(*columns).get(pk=never.pk) == (None, None, None, None)
    finally:
        call_command("migrate", "scoring", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrating_reads_the_dimensions_and_missing_tools_of_completed_scores():
    before, after = [("scoring", "0015_stats_missing_tool_key")], [("scoring", "0016_parse_backfill")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        sessions, scores = old.get_model("scoring", "AlertSession"), old.get_model("scoring", "SessionScore")
        session = sessions.objects.create(session_id=uuid.uuid4(), alert_type="k", status="completed", started_at_us=1)
        common = {"session": session, "score_triggered_by": "bob", "started_at_us": 1, "prompt_hash": "a" * 64}
        completed = scores.objects.create(
            **common,
            scored_at_us=1,
            status="completed",
            total_score=61,
            score_analysis="Logical Flow: 15/25\nConsistency: 18/25\nTool Relevance: 14/25\nSynthesis Quality: 13/25",
            missing_tools_analysis="1. **kubectl-logs** - the last output\n2. **read_file** - the script",
        )
        failed = scores.objects.create(**common, scored_at_us=2, status="failed", error_message="timed out")

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        migrated, tools = new.get_model("scoring", "SessionScore"), new.get_model("scoring", "MissingTool")

        assert migrated.objects.get(pk=completed.pk).dimensions == {
            "logical_flow": 15,
            "consistency": 18,
            "tool_relevance": 14,
            "synthesis_quality": 13,
        }
        assert migrated.objects.get(pk=completed.pk).warnings == [
            "score breakdown: the four criteria add up to 60, not to the total score 61"
        ]
        assert list(tools.objects.filter(score_id=completed.pk).values_list("position", "name", "key")) == [
            (0, "kubectl-logs", "kubectl-logs"),
            (1, "read_file", "read-file"),
        ]
        assert migrated.objects.get(pk=failed.pk).dimensions is None
        assert not tools.objects.filter(score_id=failed.pk).exists()
    finally:
        call_command("migrate", "scoring", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrating_copies_each_sessions_newest_completed_figures_onto_it():
    before, after = [("scoring", "0020_quota_pacing")], [("scoring", "0021_statsperf_latest_completed_figures")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        sessions, scores = old.get_model("scoring", "AlertSession"), old.get_model("scoring", "SessionScore")
        session = sessions.objects.create(session_id=uuid.uuid4(), alert_type="k", status="completed", started_at_us=1)
        common = {"session": session, "score_triggered_by": "bob", "started_at_us": 1}
        completed = scores.objects.create(
            **common,
            prompt_hash="a" * 64,
            scored_at_us=1,
            status="completed",
            total_score=61,
            judge_model="openai/gpt-5",
            input_tokens=1000,
            dimensions={"logical_flow": 15, "consistency": None, "tool_relevance": 14},
        )
        failed = scores.objects.create(
            **common, prompt_hash="b" * 64, scored_at_us=2, status="failed", input_tokens=900, cost_usd="0.5"
        )
        sessions.objects.filter(pk=session.pk).update(latest_score_id=failed.pk, latest_completed_score_id=completed.pk)

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        migrated = executor.loader.project_state(after).apps.get_model("scoring", "AlertSession")
        figures = ("total_score", "prompt_hash", "judge_model", *DIMENSIONS)

        assert migrated.objects.values_list(*(f"latest_completed_{name}" for name in figures)).get(
            pk=session.pk
        ) == (61, "a" * 64, "openai/gpt-5", 15, None, 14, None)
        sums = ("failed", "input_tokens", "output_tokens")
        assert migrated.objects.values_list(*(f"scorings_{name}" for name in sums)).get(pk=session.pk) == (
            1,
            1900,
            None,
        )
        assert migrated.objects.get(pk=session.pk).scorings_cost_usd == Decimal("0.5")
    finally:
        call_command("migrate", "scoring", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrating_copies_onto_each_missing_tool_its_score_total_and_session_alert_type_and_chain():
    before = [("scoring", "0021_statsperf_latest_completed_figures")]
    after = [("scoring", "0022_backlog_missing_tool_copies")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        sessions, scores = old.get_model("scoring", "AlertSession"), old.get_model("scoring", "SessionScore")
        session = sessions.objects.create(
            session_id=uuid.uuid4(), alert_type="k", chain_id="k-chain", status="completed", started_at_us=1
        )
        score = scores.objects.create(
            session=session,
            score_triggered_by="bob",
            started_at_us=1,
            prompt_hash="a" * 64,
            scored_at_us=1,
            status="completed",
            total_score=61,
        )
        old.get_model("scoring", "MissingTool").objects.create(score=score, name="pods_log", key="pods-log", position=0)

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        tools = executor.loader.project_state(after).apps.get_model("scoring", "MissingTool")

        assert list(tools.objects.values_list("total_score", "alert_type", "chain_id")) == [(61, "k", "k-chain")]
    finally:
        call_command("migrate", "scoring", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrating_marks_the_completed_scores_without_an_evaluation_and_copies_it_onto_their_sessions():
    before, after = [("scoring", "0025_report_inputs")], [("scoring", "0026_judge_replies_and_transcripts")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        sessions, scores = old.get_model("scoring", "AlertSession"), old.get_model("scoring", "SessionScore")
        common = {"score_triggered_by": "bob", "started_at_us": 1, "prompt_hash": "a" * 64, "status": "completed"}
        marked = {}
        for analysis in ("", "Logical Flow: 14/25\nConsistency: 15/25", " ".join(["Reasoned"] * 60)):
            session = sessions.objects.create(session_id=uuid.uuid4(), alert_type="k", status="completed", started_at_us=1)
            score = scores.objects.create(
                session=session, scored_at_us=1, total_score=54, score_analysis=analysis, warnings=["w"], **common
            )
            sessions.objects.filter(pk=session.pk).update(latest_score_id=score.pk, latest_completed_score_id=score.pk)
            marked[score.pk] = bool(analysis.count(" ") < 50)

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        migrated, copies = new.get_model("scoring", "SessionScore"), new.get_model("scoring", "AlertSession")

        for score in migrated.objects.all():
            assert score.analysis_missing is marked[score.pk]
            assert score.warnings == (["w", replies.ANALYSIS_MISSING_WARNING] if marked[score.pk] else ["w"])
            copy = copies.objects.get(latest_completed_score_id=score.pk)
            assert copy.latest_completed_analysis_missing is marked[score.pk]
            assert (copy.latest_completed_judge_temperature, copy.latest_completed_judge_seed) == (None, None)
    finally:
        call_command("migrate", "scoring", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migrating_makes_each_stored_criteria_a_version_and_the_shipped_ones_current():
    before, after = [("scoring", "0027_judge_token_ratio")], [("scoring", "0028_criteria_versions")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        history = executor.loader.project_state(before).apps.get_model("scoring", "ScoringCriteria")
        history.objects.all().delete()  # what migrating back wrote of the versions the tests start with
        old = "old {{SESSION_CONVERSATION}}"
        old_hash = Criteria(score_prompt=old, followup_prompt="old?").prompt_hash
        history.objects.create(prompt_hash=old_hash, score_prompt=old, followup_prompt="old?")
        history.objects.create(
            prompt_hash=PROMPT_HASH,
            score_prompt=JUDGE_PROMPT_SCORE,
            followup_prompt=JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS,
        )

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        versions = executor.loader.project_state(after).apps.get_model("scoring", "CriteriaVersion")

        assert set(versions.objects.values_list("prompt_hash", "state", "scope", "score_prompt")) == {
            (old_hash, "retired", "global", old),
            (PROMPT_HASH, "current", "global", JUDGE_PROMPT_SCORE),
        }

        system = Criteria(score_prompt=old, followup_prompt="old?", system_prompt="You judge.")
        versions.objects.create(
            prompt_hash=system.prompt_hash, score_prompt=old, followup_prompt="old?", system_prompt="You judge.",
            state="candidate", created_by="carol",
        )  # fmt: skip

        executor = MigrationExecutor(connection)
        executor.migrate(before)  # and back: the criteria history again, of the versions it can hold
        history = executor.loader.project_state(before).apps.get_model("scoring", "ScoringCriteria")
        assert set(history.objects.values_list("prompt_hash", flat=True)) == {old_hash, PROMPT_HASH}
    finally:
        call_command("migrate", "scoring", verbosity=0)
