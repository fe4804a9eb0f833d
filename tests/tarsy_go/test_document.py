"""Go TARSy documents (scoring.tarsy_go.document): every e2e scenario of Go TARSy with a
session imports whole, with what all sources share in columns; Go's own judge's score and
its reviewers' verdict are copied beside ours; values Go adds later are kept, not refused."""

import copy
import io
import json

import pytest
from django.core.management import call_command

from scoring import services
from scoring.models import AlertSession, ScoringStatus, SessionSource
from scoring.tarsy import ingest
from scoring.tarsy.documents import InvalidSession
from scoring.tarsy_go.document import PARTIAL_DOCUMENT_ERROR
from tests.support.factories import run_next_scoring
from tests.support.fake_llm import Reply
from tests.support.servers import REPO_DIR
from tests.support.tarsy_go import SESSION_SCENARIOS, golden_api_answers, golden_document
from tests.support.judge_replies import evaluated


def parse(document) -> dict:
    return ingest.parse_document(document)


def errors_of(document) -> dict:
    with pytest.raises(InvalidSession) as caught:
        parse(document)
    return caught.value.errors


@pytest.mark.parametrize("scenario", SESSION_SCENARIOS)
def test_every_go_scenario_with_a_session_is_stored_whole(db, scenario):
    document = golden_document(scenario)

    session, outcome = services.ingest_session(copy.deepcopy(document), written_by="test")

    assert outcome is services.IngestOutcome.CREATED
    stored = AlertSession.objects.get(pk=session.pk)
    assert stored.source == SessionSource.TARSY_GO
    assert stored.source_document == document  # nothing of the investigation is lost
    detail = document["session"]
    assert str(stored.session_id) == detail["id"]
    assert (stored.alert_type, stored.chain_id, stored.status) == (
        detail["alert_type"], detail["chain_id"], detail["status"]
    )  # fmt: skip
    assert stored.alert_data == detail["alert_data"]
    assert stored.final_analysis == detail["final_analysis"]
    assert stored.final_analysis_summary == detail["executive_summary"]
    assert stored.started_at_us < stored.completed_at_us
    assert stored.stages == [] and stored.session_level_interactions == []
    assert stored.investigation_bytes > 0 and stored.ingest_notes == []
    assert stored.is_terminal


@pytest.mark.parametrize("scenario", SESSION_SCENARIOS)
def test_every_go_scenario_scores_end_to_end(db, judge_llm, fake_llm, scenario):
    session, _ = services.ingest_session(golden_document(scenario), written_by="test")
    fake_llm.push(
        Reply(evaluated("Logical Flow: 20/25\nConsistency: 20/25\nTool Relevance: 15/25\nSynthesis Quality: 15/25\n\n70")),
        Reply("1. **kubectl-events**: would have shown the OOM kills"),
    )
    services.score_request(session_id=session.pk, triggered_by="test")

    score = run_next_scoring()

    assert score.status == ScoringStatus.COMPLETED and score.total_score == 70
    prompt = fake_llm.requests[0].messages[-1]["content"]
    assert golden_document(scenario)["session"]["final_analysis"] in prompt
    assert score.investigation_digest == AlertSession.objects.get(pk=session.pk).investigation_digest


def test_storing_the_same_document_again_changes_nothing(db):
    services.ingest_session(golden_document("pipeline"), written_by="test")

    _, outcome = services.ingest_session(golden_document("pipeline"), written_by="test")

    assert outcome is services.IngestOutcome.UNCHANGED


def test_a_review_added_later_updates_the_session_but_not_what_the_judge_read(db):
    session, _ = services.ingest_session(golden_document("pipeline"), written_by="test")
    reviewed = golden_document("pipeline")
    reviewed["session"].update(
        review_status="reviewed", quality_rating="partially_accurate", action_taken="Raised the limit",
        investigation_feedback="Missed the HPA", assignee="alice",
    )  # fmt: skip
    reviewed["review_activity"] = {
        "activities": [
            {"id": "a1", "actor": "alice", "action": "claim", "from_status": "needs_review",
             "to_status": "in_progress", "created_at": "2026-03-02T10:00:00Z"},
            {"id": "a2", "actor": "bob", "action": "complete", "from_status": "in_progress",
             "to_status": "reviewed", "quality_rating": "partially_accurate",
             "created_at": "2026-03-02T10:05:00.250Z"},
        ]
    }  # fmt: skip

    stored, outcome = services.ingest_session(reviewed, written_by="test")

    assert outcome is services.IngestOutcome.UPDATED
    stored.refresh_from_db()
    assert (stored.source_review_status, stored.source_quality_rating) == ("reviewed", "partially_accurate")
    assert (stored.source_action_taken, stored.source_investigation_feedback) == (
        "Raised the limit", "Missed the HPA"
    )  # fmt: skip
    assert stored.source_reviewer == "bob" and stored.source_reviewed_at_us == 1772445900250000
    assert stored.investigation_digest == session.investigation_digest


def test_go_tarsys_own_score_is_copied_with_the_model_of_its_scoring_stage(db):
    document = golden_document("pipeline")
    score = golden_api_answers("scoring").score
    document["score"] = score
    document["session"]["stages"].append(
        {
            "id": score["stage_id"] or "scoring-stage", "stage_name": "Scoring", "stage_index": 99,
            "stage_type": "scoring", "status": "completed", "parallel_type": None, "expected_agent_count": 1,
            "started_at": None, "completed_at": None,
            "executions": [{"execution_id": "e", "agent_name": "ScoringAgent", "agent_index": 1,
                            "status": "completed", "llm_backend": "google-native", "llm_provider": "p",
                            "model_name": "judge-model-x"}],
        }
    )  # fmt: skip

    fields = parse(document)

    assert fields["source_score_total"] == score["total_score"]
    assert fields["source_score_prompt_hash"] == score["prompt_hash"]
    assert fields["source_score_failure_tags"] == score["failure_tags"]
    assert fields["source_score_model"] == "judge-model-x"
    assert fields["source_scored_at_us"] is not None


def test_a_score_that_did_not_complete_is_not_copied():
    document = golden_document("pipeline")
    document["score"] = {**golden_api_answers("scoring").score, "status": "failed", "total_score": None}

    assert parse(document)["source_score_total"] is None


def test_values_go_tarsy_adds_later_are_kept(db):
    document = golden_document("pipeline")
    session = document["session"]
    session.update(status="some_new_status", labels={"team": "payments"}, cancelled_by="alice")
    session["review_status"] = "escalated"
    session["stages"][0]["stage_type"] = "compose"
    session["stages"][0]["executions"][0].update(cache_read_tokens=10, reasoning_effort="high")
    document["timeline"][0]["event_type"] = "composition"

    stored, _ = services.ingest_session(document, written_by="test")

    stored.refresh_from_db()
    assert stored.status == "some_new_status" and not stored.is_terminal
    assert stored.source_review_status == "escalated"
    assert stored.source_document["session"]["labels"] == {"team": "payments"}


def test_a_document_of_an_unknown_format_version_is_refused_saying_which_is_read():
    assert errors_of({**golden_document("skills"), "format": "tarsy-go/9"}) == {
        "format": ["Unknown Go TARSy document format 'tarsy-go/9'; this service reads 'tarsy-go/1'."]
    }


def test_go_tarsys_session_detail_sent_alone_is_refused_saying_what_to_send():
    detail = golden_document("skills")["session"]

    assert errors_of(detail) == {"non_field_errors": [PARTIAL_DOCUMENT_ERROR]}


def test_errors_name_the_json_path_of_each_bad_value():
    document = golden_document("skills")
    document["session"]["created_at"] = "yesterday"
    document["session"]["id"] = "not-a-uuid"
    document["timeline"][2] = "an event"
    interaction_id = next(iter(document["llm_interactions"]))
    document["llm_interactions"][interaction_id]["conversation"][0]["content"] = 7
    del document["trace"]

    errors = errors_of(document)

    assert errors == {
        "trace": ["This field is required (an object)."],
        f"llm_interactions.{interaction_id}.conversation[0].content": ["Expected a string, got an integer."],
        "timeline[2]": ["Expected a timeline event (an object), got a string."],
        "session.created_at": ["Expected an RFC 3339 time after 1970, got 'yesterday'."],
        "session.id": ["'not-a-uuid' is not a valid UUID."],
    }


def test_a_nul_in_go_tarsys_tool_output_is_replaced_and_noted():
    document = golden_document("skills")
    interaction_id = next(iter(document["mcp_interactions"]))
    document["mcp_interactions"][interaction_id]["tool_result"] = {"content": "PID 1\x00python"}

    fields = parse(document)

    result = fields["source_document"]["mcp_interactions"][interaction_id]["tool_result"]
    assert result == {"content": "PID 1\ufffdpython"}
    assert fields["ingest_notes"] == [
        "1 NUL character (\\u0000), which the database cannot store, replaced with U+FFFD in: "
        f"source_document.mcp_interactions.{interaction_id}.tool_result.content (1)."
    ]


def test_import_sessions_says_which_source_each_session_came_from(db, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    for scenario in SESSION_SCENARIOS:
        (folder / f"go-{scenario}.json").write_text(json.dumps(golden_document(scenario)))
    samples = sorted((REPO_DIR / "scoring" / "samples").glob("0[12]_*.json"))
    for sample in samples:
        (folder / sample.name).write_text(sample.read_text())
    out = io.StringIO()

    call_command("import_sessions", str(folder), stdout=out, stderr=io.StringIO())

    assert out.getvalue().strip() == (
        f"unchanged: 0, created: {len(SESSION_SCENARIOS) + len(samples)}, updated: 0, rejected: 0; "
        f"tarsy-bot: {len(samples)}, tarsy-go: {len(SESSION_SCENARIOS)}"
    )
    assert AlertSession.objects.filter(source=SessionSource.TARSY_GO).count() == len(SESSION_SCENARIOS)


def test_import_sessions_verbose_names_each_sessions_source(db, tmp_path):
    go_file, bot_file = tmp_path / "go.json", tmp_path / "bot.json"
    go_document = golden_document("skills")
    go_file.write_text(json.dumps(go_document))
    bot_file.write_text((REPO_DIR / "scoring" / "samples" / "01_single_stage_react.json").read_text())
    out = io.StringIO()

    call_command("import_sessions", str(go_file), str(bot_file), verbosity=2, stdout=out, stderr=io.StringIO())

    bot_id = json.loads(bot_file.read_text())["session_id"]
    assert out.getvalue().splitlines()[:2] == [
        f"created: {go_file}: tarsy-go session {go_document['session']['id']}",
        f"created: {bot_file}: tarsy-bot session {bot_id}",
    ]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d.update(review_activity={"activities": 7}), "review_activity.activities"),
        (lambda d: d.update(score={"status": "completed", "total_score": 70}) or d["session"].update(stages=3),
         "session.stages"),
    ],
)  # fmt: skip
def test_parts_of_the_wrong_type_are_reported_by_path_not_tripped_over(change, path):
    document = golden_document("skills")
    change(document)

    assert path in errors_of(document)


def test_a_review_activitys_bad_time_is_reported_where_it_stands():
    document = golden_document("skills")
    document["review_activity"] = {
        "activities": [{"action": "claim"}, {"action": "complete", "actor": "bob", "created_at": "soon"}]
    }

    assert errors_of(document) == {
        "review_activity.activities[1].created_at": ["Expected an RFC 3339 time after 1970, got 'soon'."]
    }
