"""Sessions and scores for tests, stored through the ORM."""

import time
import uuid

import pytest
from rest_framework.test import APIClient

from scoring import auth, selectors, services
from scoring.judge.prompts import PROMPT_HASH
from scoring.judge.replies import DIMENSIONS, ToolName, tool_key
from scoring.models import AlertSession, MissingTool, ScoringStatus, SessionScore, SessionSource

T0_US = 1_767_225_600_000_000


def make_session(**overrides) -> AlertSession:
    fields = {
        "session_id": uuid.uuid4(),
        "alert_type": "kubernetes",
        "agent_type": "chain:kubernetes-agent-chain",
        "chain_id": "kubernetes-agent-chain",
        "status": "completed",
        "author": "alice",
        "started_at_us": T0_US,
        "completed_at_us": T0_US + 40_000_000,
        "alert_data": {"alert": "NamespaceTerminating", "namespace": "stuck-namespace"},
        "final_analysis": "**Root Cause:** orphaned finalizer on stuck-namespace.",
        "stages": [],
        "session_level_interactions": [],
    }
    fields.update(overrides)
    return AlertSession.objects.create(**fields)


def make_go_session(rating: str = "", tarsy_total: int | None = None, **overrides) -> AlertSession:
    """A Go TARSy session with its reviewers' ``rating`` ("": none) and its own judge's score
    ``tarsy_total`` (None: none), by gemini-2.5-flash under prompt hash c…c unless ``overrides``
    say."""
    fields = {"source": SessionSource.TARSY_GO, "source_quality_rating": rating}
    fields["source_score_total"] = tarsy_total
    if tarsy_total is not None:
        fields |= {"source_score_prompt_hash": "c" * 64, "source_score_model": "gemini-2.5-flash"}
    return make_session(**fields | overrides)


def make_score(session: AlertSession, status: str = ScoringStatus.COMPLETED, **overrides) -> SessionScore:
    """A score requested and started just now (an older active score would be an orphan)."""
    finished = status in ScoringStatus.terminal_values()
    now_us = time.time_ns() // 1000
    fields = {
        "session": session,
        "prompt_hash": PROMPT_HASH,
        "score_triggered_by": "bob",
        "scored_at_us": now_us,
        "started_at_us": now_us,
        "status": status,
        "total_score": 61 if status == ScoringStatus.COMPLETED else None,
        "score_analysis": "Logical Flow: 15/25 ..." if status == ScoringStatus.COMPLETED else None,
        "missing_tools_analysis": "1. kubectl-logs ..." if status == ScoringStatus.COMPLETED else None,
        "error_message": "judge LLM timed out" if status == ScoringStatus.FAILED else None,
        "completed_at_us": now_us + 30_000_000 if finished else None,
    }
    fields.update(overrides)
    if status == ScoringStatus.PENDING and "started_at_us" not in overrides:
        fields["started_at_us"] = fields["scored_at_us"]  # due since its request, as services.pending_score writes it
    score = SessionScore.objects.create(**fields)
    services.copy_latest_scores([score.session_id])  # as the services do with every change
    return score


def add_missing_tools(score: SessionScore, *names: str, keys=None, first_position: int = 0) -> list[MissingTool]:
    """``score``'s missing-tool rows for these names (keyed by ``tool_key`` unless ``keys``
    are given), stored as a completion stores them (``services.missing_tool_rows``)."""
    keys = keys or [tool_key(name) for name in names]
    rows = services.missing_tool_rows(score, [ToolName(name, key) for name, key in zip(names, keys, strict=True)])
    for row in rows:
        row.position += first_position
    return MissingTool.objects.bulk_create(rows)


LATEST_FIELDS = ("latest_score_id", "latest_status", "latest_total_score", "latest_prompt_hash")


def copy_on_session(session: AlertSession) -> tuple:
    """The session row's copy of its newest score (``AlertSession.latest_*``), as stored now."""
    session.refresh_from_db(fields=LATEST_FIELDS)
    return tuple(getattr(session, field) for field in LATEST_FIELDS)


def newest_score(session: AlertSession) -> tuple:
    """The same four values, read from the session's newest score itself."""
    score = selectors.latest_score(session.session_id)
    return (score.score_id, score.status, score.total_score, score.prompt_hash)


COMPLETED_FIGURES = (
    "score_id", "total_score", "prompt_hash", "judge_model", "judge_temperature", "judge_seed", "analysis_missing",
)  # fmt: skip


def _completed_columns() -> list[str]:
    return [*selectors.latest_completed_columns(), *selectors.latest_completed_judge_columns()]


def completed_copy_on_session(session: AlertSession) -> dict:
    """The session row's copy of its newest completed score (``latest_completed_*``)."""
    return AlertSession.objects.filter(pk=session.pk).values(*_completed_columns()).get()


def newest_completed_figures(session: AlertSession) -> dict:
    """The same values, read from the session's newest completed score itself."""
    score = session.scores.filter(status=ScoringStatus.COMPLETED).order_by("-scored_at_us").first()
    if score is None:
        return dict.fromkeys(_completed_columns())
    figures = {f"latest_completed_{field}": getattr(score, field) for field in COMPLETED_FIGURES}
    return figures | {f"latest_completed_{name}": (score.dimensions or {}).get(name) for name in DIMENSIONS}


def scorings_copy_on_session(session: AlertSession) -> dict:
    """The session row's sums over all its scorings (``scorings_*``)."""
    return AlertSession.objects.filter(pk=session.pk).values(*selectors.scorings_columns()).get()


def scorings_sums(session: AlertSession) -> dict:
    """The same sums, added up here from the session's scorings (None: no scoring has the figure)."""
    scores = list(session.scores.all())
    if not scores:
        return dict.fromkeys(selectors.scorings_columns())

    def total(field):
        values = [getattr(score, field) for score in scores if getattr(score, field) is not None]
        return sum(values) if values else None

    return {
        "scorings_failed": sum(score.status == ScoringStatus.FAILED for score in scores),
        "scorings_input_tokens": total("input_tokens"),
        "scorings_output_tokens": total("output_tokens"),
        "scorings_cost_usd": total("cost_usd"),
        "scorings_cached_input_tokens": total("cached_input_tokens"),
    }


def run_next_scoring() -> SessionScore | None:
    """What a worker's judge runtime does with a free slot, in this thread: claim
    the oldest pending score and judge it to its end. None if none was claimed."""
    claimed = services.claim_pending_scores(1)
    return services.run_claimed_score(claimed[0]) if claimed else None


def proxy_client(username: str = "alice") -> APIClient:
    """A REST client authenticated the way oauth2-proxy does it (from loopback)."""
    client = APIClient()
    client.credentials(HTTP_X_FORWARDED_USER=username)
    return client


@pytest.fixture(autouse=True)
def forget_remembered_rows():
    """Each test's rows are rolled back or flushed, without signals: so is what the
    process remembers of them (proxy users)."""
    yield
    auth.forget_proxy_users()


@pytest.fixture
def operator_client() -> APIClient:
    return proxy_client("alice")
