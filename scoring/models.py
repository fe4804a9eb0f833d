"""Alert sessions imported from TARSy, and the judge's scores of them."""

import uuid
from decimal import Decimal
from functools import cached_property

from django.conf import settings
from django.db import models
from django.db.models import Q

from scoring.tarsy.alert import AlertHeading, alert_heading


class SessionStatus(models.TextChoices):
    """TARSy's AlertSessionStatus values."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    PAUSED = "paused"
    CANCELING = "canceling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @classmethod
    def terminal_values(cls) -> list[str]:
        """Statuses of a finished session: only these can be scored."""
        return [cls.COMPLETED, cls.FAILED, cls.CANCELLED, cls.TIMED_OUT]


class SessionSource(models.TextChoices):
    """Which generation of TARSy a session came from: the shape of its document, how it is
    rendered for the judge and how it is pulled (``scoring.tarsy_bot``, ``scoring.tarsy_go``)."""

    TARSY_BOT = "tarsy-bot", "tarsy-bot"
    TARSY_GO = "tarsy-go", "TARSy (Go)"


class QualityRating(models.TextChoices):
    """A Go TARSy reviewer's verdict on a session's investigation."""

    ACCURATE = "accurate"
    PARTIALLY_ACCURATE = "partially_accurate"
    INACCURATE = "inaccurate"


class AlertSession(models.Model):
    """One TARSy alert session, from either source (``source``).

    What every source has (alert, chain, status, times, final analysis) is in columns;
    the investigation is kept in its source's own JSON shape: the judge reads it whole,
    and nothing queries inside it. A tarsy-bot session's is in ``stages`` and
    ``session_level_interactions`` (its history API's document); a Go TARSy session's is
    ``source_document`` (its API's answers, docs/sync.md). List queries defer those
    columns (``HEAVY_FIELDS``, see selectors).
    """

    session_id = models.UUIDField(primary_key=True)
    source = models.CharField(
        max_length=16, choices=SessionSource.choices, default=SessionSource.TARSY_BOT, db_index=True
    )
    alert_type = models.CharField(max_length=255, db_index=True)
    agent_type = models.CharField(max_length=255, blank=True, default="")
    chain_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=32, choices=SessionStatus.choices, db_index=True)
    author = models.CharField(max_length=255, blank=True, default="")
    runbook_url = models.TextField(blank=True, default="")
    started_at_us = models.BigIntegerField(db_index=True)
    completed_at_us = models.BigIntegerField(null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    alert_data = models.JSONField(default=dict)
    final_analysis = models.TextField(null=True, blank=True)
    final_analysis_summary = models.TextField(null=True, blank=True)
    stages = models.JSONField(default=list)
    session_level_interactions = models.JSONField(default=list)
    # Go TARSy: the session as its API answered (scoring.tarsy_go.document); null for tarsy-bot.
    source_document = models.JSONField(null=True, blank=True)
    # Go TARSy's own judge's score of the session, copied from source_document (null: it has
    # none completed): shown beside ours as TARSy's judge, never counted as ours.
    source_score_total = models.IntegerField(null=True, blank=True, editable=False)
    source_score_prompt_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    source_score_model = models.CharField(max_length=255, blank=True, default="", editable=False)
    source_score_failure_tags = models.JSONField(default=list, blank=True, editable=False)
    source_scored_at_us = models.BigIntegerField(null=True, blank=True, editable=False)
    # Go TARSy's reviewers' verdict on the session, copied from source_document ("": none).
    source_review_status = models.CharField(max_length=32, blank=True, default="", editable=False)
    source_quality_rating = models.CharField(
        max_length=32, blank=True, default="", choices=QualityRating.choices, editable=False, db_index=True
    )
    source_action_taken = models.TextField(blank=True, default="", editable=False)
    source_investigation_feedback = models.TextField(blank=True, default="", editable=False)
    source_reviewer = models.CharField(max_length=255, blank=True, default="", editable=False)
    source_reviewed_at_us = models.BigIntegerField(null=True, blank=True, editable=False)
    # Size of the investigation as received, for operators and the token estimate.
    investigation_bytes = models.BigIntegerField(default=0)
    # What ingest had to change to store the document (for example NUL characters
    # replaced), one sentence each; empty when it was stored exactly as sent.
    ingest_notes = models.JSONField(default=list, blank=True)
    # rendering.investigation_digest of the stored version; null for sessions stored
    # before digests existed (until they are written again or scored).
    investigation_digest = models.CharField(max_length=64, null=True, blank=True, editable=False)
    # Length of the judge's score prompt with this session in it, for the token
    # estimate of score_sessions --dry-run; null for sessions stored before it was kept.
    judge_prompt_chars = models.BigIntegerField(null=True, blank=True, editable=False)
    imported_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # A copy of the newest score's id, status, total and prompt hash (null: never
    # scored), written in the same transaction as every change to a score
    # (services.copy_latest_scores), so that the session lists filter and sort on
    # indexed columns of this table instead of a subquery per session.
    latest_score_id = models.UUIDField(null=True, blank=True, editable=False)
    latest_status = models.CharField(max_length=50, null=True, blank=True, editable=False)
    latest_total_score = models.IntegerField(null=True, blank=True, editable=False)
    latest_prompt_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)
    # The newest *completed* score's id (null: none completed), copied the same way: a
    # session's standing in the fleet statistics (scoring.insights) is its newest
    # completed score, whatever scoring came after it.
    latest_completed_score_id = models.UUIDField(null=True, blank=True, editable=False, db_index=True)
    # ... and its figures the fleet statistics group and count (its total, criteria hash,
    # judge model, and the points of each criterion, null when the judge gave none), so
    # that they are one scan of this table instead of a join with every score.
    latest_completed_total_score = models.IntegerField(null=True, blank=True, editable=False)
    latest_completed_prompt_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)
    latest_completed_judge_model = models.CharField(max_length=255, null=True, blank=True, editable=False)
    latest_completed_judge_temperature = models.FloatField(null=True, blank=True, editable=False)
    latest_completed_judge_seed = models.BigIntegerField(null=True, blank=True, editable=False)
    # ... and whether that score lacks an evaluation (SessionScore.analysis_missing): the fleet
    # statistics leave such sessions out unless asked to include them.
    latest_completed_analysis_missing = models.BooleanField(null=True, blank=True, editable=False)
    latest_completed_logical_flow = models.IntegerField(null=True, blank=True, editable=False)
    latest_completed_consistency = models.IntegerField(null=True, blank=True, editable=False)
    latest_completed_tool_relevance = models.IntegerField(null=True, blank=True, editable=False)
    latest_completed_synthesis_quality = models.IntegerField(null=True, blank=True, editable=False)
    # Over every scoring of the session (failed ones and those a re-score replaced too),
    # copied the same way: the failed scorings, tokens and cost the statistics count.
    scorings_failed = models.IntegerField(null=True, blank=True, editable=False)
    scorings_input_tokens = models.BigIntegerField(null=True, blank=True, editable=False)
    scorings_output_tokens = models.BigIntegerField(null=True, blank=True, editable=False)
    scorings_cost_usd = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True, editable=False)
    scorings_cached_input_tokens = models.BigIntegerField(null=True, blank=True, editable=False)

    HEAVY_FIELDS = ("stages", "session_level_interactions", "source_document")

    class Meta:
        db_table = "alert_sessions"
        ordering = ["-started_at_us"]
        indexes = [
            models.Index(fields=["latest_total_score", "started_at_us"], name="ix_alert_sessions_latest_tot"),
            models.Index(fields=["latest_status", "started_at_us"], name="ix_alert_sessions_latest_st"),
        ]

    def __str__(self) -> str:
        return f"{self.heading.title} {self.session_id}"

    @property
    def is_terminal(self) -> bool:
        return self.status in SessionStatus.terminal_values()

    @property
    def tarsy_dashboard_url(self) -> str | None:
        """The session's page in Go TARSy's dashboard (``TARSY_DASHBOARD_URL``), if known."""
        if self.source != SessionSource.TARSY_GO or not settings.TARSY_DASHBOARD_URL:
            return None
        return f"{settings.TARSY_DASHBOARD_URL}/sessions/{self.session_id}"

    @cached_property
    def heading(self) -> AlertHeading:
        """The alert's name and a one-line summary: what the lists, the page heading, the
        admin and the API show to tell sessions apart (``scoring.tarsy.alert``)."""
        return alert_heading(self.alert_type, self.alert_data, self.final_analysis_summary)


# The smallest step of a stored cost in USD (the cost_usd columns' ten decimal places).
COST_QUANTUM = Decimal("1e-10")


class ScoringStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"

    @classmethod
    def terminal_values(cls) -> list[str]:
        return [cls.COMPLETED, cls.FAILED]

    @classmethod
    def active_values(cls) -> list[str]:
        return [cls.PENDING, cls.IN_PROGRESS]


class SessionScore(models.Model):
    """One judge scoring of a session (EP-0028, Phase 1: the ``session_scores`` table).

    Every scoring is kept: a re-score adds a row, and the score of a session is
    its newest row. At most one row per session may be pending or in progress.
    """

    score_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, db_column="session_id", related_name="scores"
    )
    prompt_hash = models.CharField(max_length=64)
    total_score = models.IntegerField(null=True, blank=True)
    score_analysis = models.TextField(null=True, blank=True)
    missing_tools_analysis = models.TextField(null=True, blank=True)
    score_triggered_by = models.CharField(max_length=255)
    scored_at_us = models.BigIntegerField()
    status = models.CharField(max_length=50, choices=ScoringStatus.choices)
    started_at_us = models.BigIntegerField()
    completed_at_us = models.BigIntegerField(null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    # Beyond EP-0028: what produced the score and what it cost.
    judge_model = models.CharField(max_length=255, blank=True, default="")
    # The sampling settings the judge calls sent (SCORING_LLM_TEMPERATURE, SCORING_LLM_SEED; null:
    # none sent, the provider's default applied): with the model, the judge's identity
    # (scoring.judge.sampling.judge_label). Null for scores made before they were sent.
    judge_temperature = models.FloatField(null=True, blank=True)
    judge_seed = models.BigIntegerField(null=True, blank=True)
    # Over the conversation's answered calls (a failed scoring's too, up to its failure); the
    # spend budgets add cost_usd up (scoring.budget).
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True)
    # Of input_tokens, those the provider read from its prompt cache (turn 2 rereading turn 1);
    # cost_usd has their discount. Null for scores made before it was recorded.
    cached_input_tokens = models.IntegerField(null=True, blank=True)
    # Instruction-like text found in the session's data (scoring.judge.injection), one
    # short description each: the score may have been steered.
    warnings = models.JSONField(default=list, blank=True)
    # rendering.investigation_digest of the session as the judge read it; null for
    # scores made before digests existed (whether the session changed is unknown).
    investigation_digest = models.CharField(max_length=64, null=True, blank=True, editable=False)
    # Read from the judge's text (scoring.judge.replies), never asked of it: the four
    # criteria's points ({"logical_flow": 15, "consistency": 18, "tool_relevance": 14,
    # "synthesis_quality": 13}); null when the analysis has no such breakdown.
    dimensions = models.JSONField(null=True, blank=True)
    # SCORING_JUDGE_SAMPLES: every turn-1 score when the judge was asked k times (the
    # total is their median), and max - min of them; null for a single sample.
    score_samples = models.JSONField(null=True, blank=True)
    score_spread = models.IntegerField(null=True, blank=True)
    # score_spread was over SCORING_UNSTABLE_SPREAD when the score was made.
    unstable = models.BooleanField(default=False)
    # The share of the investigation's text the judge saw, 0..1: below 1 when tool results
    # were cut to fit the judge model's context window (docs/rendering.md); null until the prompt is fitted.
    input_coverage = models.FloatField(null=True, blank=True)
    # The judge gave its score without the evaluation the criteria ask for, even when asked once
    # more (scoring.judge.replies.has_evaluation): its turn 2 was not asked (missing_tools_analysis
    # is null), a warning says so, and the insights leave it out unless asked to include it.
    analysis_missing = models.BooleanField(default=False)
    # Why a pending score waits to be picked up (the provider's quota, or for an automatic scoring
    # the spend budget: scoring.budget), "" when it does not; and when its first 429 came, from
    # which SCORING_RATE_LIMIT_PATIENCE_S is counted (null while it waits for the budget).
    waiting_reason = models.TextField(blank=True, default="")
    rate_limited_since_us = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "session_scores"
        ordering = ["-scored_at_us"]
        indexes = [
            models.Index(fields=["session"], name="ix_session_scores_session_id"),
            models.Index(fields=["prompt_hash"], name="ix_session_scores_prompt_hash"),
            models.Index(fields=["total_score"], name="ix_session_scores_total_score"),
            models.Index(fields=["status"], name="ix_session_scores_status"),
            models.Index(fields=["session", "status"], name="ix_session_scores_sess_status"),
            models.Index(fields=["status", "started_at_us"], name="ix_session_scores_stat_start"),
            # The few unstable scores, found without reading the table (insights, the dashboard's filter).
            models.Index(fields=["-score_spread"], condition=Q(unstable=True), name="ix_session_scores_unstable"),
            # The spend of the day and month, summed at every claim while a budget is set (scoring.budget).
            models.Index(fields=["completed_at_us", "cost_usd"], name="ix_session_scores_spend"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=["pending", "in_progress"]),
                name="uq_session_scores_one_active",
            ),
            models.CheckConstraint(
                condition=Q(total_score__isnull=True) | Q(total_score__gte=0, total_score__lte=100),
                name="ck_session_scores_total_score_range",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "in_progress", "completed", "failed"]),
                name="ck_session_scores_status",
            ),
        ]

    def __str__(self) -> str:
        return f"score {self.score_id} of {self.session_id} ({self.status})"

    @property
    def session_changed(self) -> bool | None:
        """Whether the session now differs from what this score judged; None when unknown
        (a score or session from before digests). Needs the ``session_digest`` annotation
        (``selectors.with_session_digest``); without it, unknown."""
        current = getattr(self, "session_digest", None)
        if self.investigation_digest is None or current is None:
            return None
        return self.investigation_digest != current

    @property
    def waiting_for(self) -> str:
        """What a waiting score waits for: "quota" (the provider's 429s), "budget" (the spend
        budget holds an automatic scoring back), or "" when it does not wait."""
        if not self.waiting_reason:
            return ""
        return "quota" if self.rate_limited_since_us is not None else "budget"


class ScoreTranscript(models.Model):
    """What the judge was sent and what it wrote for one score (``conversation.Transcript``):
    every conversation's messages as sent, after fitting, and every raw reply, restatements and
    follow-ups included, with the model and sampling settings. A table of its own, so that no
    query of scores reads it; only staff read it. Kept SCORING_TRANSCRIPT_RETENTION_DAYS."""

    score = models.OneToOneField(
        SessionScore, on_delete=models.CASCADE, primary_key=True, db_column="score_id", related_name="transcript"
    )
    recorded_at_us = models.BigIntegerField(db_index=True)
    # {"model", "temperature", "seed", "conversations": [{"messages": [...], "error"}]}
    transcript = models.JSONField()

    class Meta:
        db_table = "score_transcripts"

    def __str__(self) -> str:
        return f"transcript of score {self.score_id}"


class MissingTool(models.Model):
    """One tool the judge's turn 2 says the investigation lacked (scoring.judge.replies),
    so that the fleet's missing tools can be counted (scoring.insights)."""

    score = models.ForeignKey(SessionScore, on_delete=models.CASCADE, related_name="missing_tools")
    # As the judge wrote it, for display.
    name = models.CharField(max_length=255)
    # The name normalised for counting: the same tool written differently is one key.
    key = models.CharField(max_length=255)
    # Its place in the judge's list, from 0.
    position = models.IntegerField()
    # Copies of what the backlog counts by, so that it reads this table alone (joined to
    # the sessions only to select their newest completed scores): the score's total and
    # its session's alert type and chain. Written with the row (services.missing_tool_rows),
    # kept by ingest_session if the session's change; 0022 back-fills them.
    total_score = models.IntegerField(null=True, editable=False)
    alert_type = models.CharField(max_length=255, default="", editable=False)
    chain_id = models.CharField(max_length=255, default="", editable=False)

    class Meta:
        db_table = "score_missing_tools"
        ordering = ["score", "position"]
        indexes = [models.Index(fields=["key"], name="ix_score_missing_tools_key")]
        constraints = [
            models.UniqueConstraint(fields=["score", "position"], name="uq_score_missing_tools_position"),
            # A tool counts once per score (the parser keeps each key once): the backlog
            # counts sessions by counting rows.
            models.UniqueConstraint(fields=["score", "key"], name="uq_score_missing_tools_key"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (score {self.score_id})"


class InsightReport(models.Model):
    """An MCP prioritization report (spec decision 5): the judge model reads the
    missing-tools analyses of the selected scores and writes which tools to build
    first (``scoring.insights.reports``). It moves pending -> in_progress ->
    completed | failed, as a scoring does."""

    report_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(max_length=50, choices=ScoringStatus.choices)
    # The insight filters it covers (InsightFilters.as_params()) and the scores it read.
    filters = models.JSONField(default=dict, blank=True)
    score_ids = models.JSONField(default=list, blank=True)
    # SHA-256 of the judge model configured at the request and the sorted score ids: a request
    # with the same digest would write the same report (scoring.insights.reports.request_report).
    inputs_digest = models.CharField(max_length=64, blank=True, default="")
    requested_by = models.CharField(max_length=255)
    requested_at_us = models.BigIntegerField()
    started_at_us = models.BigIntegerField(null=True, blank=True)
    completed_at_us = models.BigIntegerField(null=True, blank=True)
    report = models.TextField(null=True, blank=True)
    judge_model = models.CharField(max_length=255, blank=True, default="")
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True)
    # Passes over the inputs: 1 when they fit one judge call; more when they were
    # summarised in parts first (and those summaries again, if need be).
    rounds = models.IntegerField(default=0)
    error_message = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "insight_reports"
        ordering = ["-requested_at_us"]
        indexes = [
            models.Index(fields=["status", "requested_at_us"], name="ix_insight_reports_status"),
            models.Index(fields=["inputs_digest"], name="ix_insight_reports_inputs"),
            models.Index(fields=["requested_by", "requested_at_us"], name="ix_insight_reports_requester"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "in_progress", "completed", "failed"]),
                name="ck_insight_reports_status",
            ),
        ]

    def __str__(self) -> str:
        return f"report {self.report_id} ({self.status})"


class SessionWrite(models.Model):
    """Who wrote a session, each time it was stored (created or replaced; a document
    sent again with the content already stored is no write).

    ``written_by`` is the API user's name, or for the commands the command and
    its source (``sync_sessions:<TARSy URL>``, ``import_sessions:<file>``). The
    session is a plain id, not a foreign key: the record outlives the session.
    """

    session_id = models.UUIDField()
    written_by = models.CharField(max_length=255)
    written_at_us = models.BigIntegerField()
    created = models.BooleanField()
    investigation_digest = models.CharField(max_length=64)

    class Meta:
        db_table = "session_writes"
        ordering = ["-written_at_us", "-id"]
        indexes = [models.Index(fields=["session_id", "written_at_us"], name="ix_session_writes_session")]

    def __str__(self) -> str:
        return f"{self.session_id} {'created' if self.created else 'replaced'} by {self.written_by}"


class CriteriaState(models.TextChoices):
    """Where a criteria version is in its life (docs/criteria.md, "States")."""

    DRAFT = "draft"  # being written: its texts may change; it never scores
    CANDIDATE = "candidate"  # texts frozen, waiting for an operator to promote it
    CURRENT = "current"  # judges the sessions of its scope; one per scope
    RETIRED = "retired"  # was current, or was set aside; kept for the scores it made


class CriteriaScope(models.TextChoices):
    """Which sessions a criteria version judges when current: every session, or those of one
    alert type, or of one chain (``scope_value`` names it). The most specific current one wins:
    alert type, then chain, then global."""

    GLOBAL = "global"
    ALERT_TYPE = "alert_type", "Alert type"
    CHAIN = "chain"


class CriteriaVersion(models.Model):
    """A version of the judge's criteria: its full instructions (``scoring.judge.prompts.Criteria``),
    the hash they make, its scope and state.

    The texts change only while it is a draft, and a draft never scores: once a score can carry
    a version's hash, its texts are fixed, so every score can be read beside the criteria that
    made it. Several versions may hold the same texts (one per scope, say): the hash names the
    texts, the version their use. Changes of state go through ``scoring.criteria``.
    """

    prompt_hash = models.CharField(max_length=64, db_index=True, editable=False)
    system_prompt = models.TextField(blank=True, default="")
    score_prompt = models.TextField()
    followup_prompt = models.TextField()
    # A calibrated version's worked examples (``scoring.judge.prompts.CalibrationExample`` as
    # JSON, docs/criteria.md "Calibration"): part of its texts and of its hash; empty for others.
    examples = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True, default="", help_text="What these criteria change, and why.")
    state = models.CharField(max_length=16, choices=CriteriaState.choices, default=CriteriaState.DRAFT)
    scope = models.CharField(max_length=16, choices=CriteriaScope.choices, default=CriteriaScope.GLOBAL)
    scope_value = models.CharField(
        max_length=255, blank=True, default="", help_text="The alert type or chain id; empty for global."
    )
    created_by = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "criteria_versions"
        ordering = ["-id"]
        permissions = [("change_criteria", "Can create, promote and roll back judge criteria")]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "scope_value"],
                condition=Q(state="current"),
                name="one_current_criteria_per_scope",
            ),
            models.CheckConstraint(
                condition=(Q(scope="global") & Q(scope_value="")) | (~Q(scope="global") & ~Q(scope_value="")),
                name="criteria_scope_value_names_the_scope",
            ),
        ]

    def __str__(self) -> str:
        return f"v{self.pk} {self.scope_label} {self.state} {self.prompt_hash[:12]}"

    @property
    def scope_label(self) -> str:
        if self.scope == CriteriaScope.GLOBAL:
            return "global"
        return f"{self.get_scope_display()} {self.scope_value}"


class CriteriaAction(models.TextChoices):
    CREATE = "create"
    EDIT = "edit"
    CANDIDATE = "candidate"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    RETIRE = "retire"


class CriteriaChange(models.Model):
    """One recorded change of a criteria version (who, when, why): the history the admin and the
    API show, and that a rollback reads to find the version to restore."""

    version = models.ForeignKey(CriteriaVersion, on_delete=models.PROTECT, related_name="changes")
    action = models.CharField(max_length=16, choices=CriteriaAction.choices)
    # A promotion: the version that was current in the scope until then (null: none was).
    replaced = models.ForeignKey(
        CriteriaVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # A rollback: the version made current again (null: the scope fell back to a wider one).
    restored = models.ForeignKey(
        CriteriaVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    changed_by = models.CharField(max_length=255)
    changed_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "criteria_changes"
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} v{self.version_id} by {self.changed_by}"


class TrialStatus(models.TextChoices):
    RUNNING = "running"  # some of its scorings are pending or in progress
    COMPLETED = "completed"  # every scoring completed or failed
    CANCELLED = "cancelled"  # stopped by an operator: its pending scorings failed unasked


class Trial(models.Model):
    """A candidate judge (a criteria version, a judge model, or both) tried beside the current
    criteria and the configured model on sessions people reviewed (docs/insights.md, "Trials"):
    each sampled session judged once by each, in scorings of its own (``TrialScoring``), so no
    score of the service changes. Nothing promotes itself: the operator reads the figures and
    decides."""

    trial_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The candidate criteria (null: the current ones judge both arms) and their hash.
    candidate = models.ForeignKey(
        CriteriaVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="trials"
    )
    candidate_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    # The candidate judge model ("": the configured one judges both arms).
    candidate_model = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=TrialStatus.choices, default=TrialStatus.RUNNING)
    # The sample asked for: how many sessions, of which alert type and chain ("" any), and the
    # seed it was drawn with (the same pool and seed draw the same sessions).
    size = models.IntegerField()
    alert_type = models.CharField(max_length=255, blank=True, default="")
    chain_id = models.CharField(max_length=255, blank=True, default="")
    seed = models.BigIntegerField()
    # The dry run's estimate when it was created (``scoring.trials.selectors.estimate``).
    estimate = models.JSONField(default=dict, blank=True)
    judge_model = models.CharField(max_length=255, blank=True, default="")
    description = models.TextField(blank=True, default="")
    created_by = models.CharField(max_length=255)
    created_at_us = models.BigIntegerField()
    ended_at_us = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "trials"
        ordering = ["-created_at_us"]

    def __str__(self) -> str:
        return f"trial of {self.candidate_label} ({self.status}, {str(self.trial_id)[:8]})"

    @property
    def candidate_label(self) -> str:
        """What is tried: "v3", "openai/gpt-4o", or "v3 with openai/gpt-4o"."""
        version = f"v{self.candidate_id}" if self.candidate_id else ""
        return " with ".join(part for part in (version, self.candidate_model) if part)


class TrialArm(models.TextChoices):
    CANDIDATE = "candidate"
    CURRENT = "current"


class TrialScoring(models.Model):
    """One session judged for a trial under one arm's criteria: a judge job as a scoring is
    (claimed by the workers after the service's own scorings), kept apart from ``SessionScore``."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="scorings")
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="+")
    arm = models.CharField(max_length=16, choices=TrialArm.choices)
    prompt_hash = models.CharField(max_length=64)
    # The model the arm's judge calls go to ("": the configured one, SCORING_LLM_MODEL).
    model = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=50, choices=ScoringStatus.choices, default=ScoringStatus.PENDING)
    # Pending: not to be claimed before then (creation, or when a quota said to come back).
    due_at_us = models.BigIntegerField()
    started_at_us = models.BigIntegerField(null=True, blank=True)
    completed_at_us = models.BigIntegerField(null=True, blank=True)
    rate_limited_since_us = models.BigIntegerField(null=True, blank=True)
    waiting_reason = models.TextField(blank=True, default="")
    total_score = models.IntegerField(null=True, blank=True)
    score_analysis = models.TextField(null=True, blank=True)
    missing_tools_analysis = models.TextField(null=True, blank=True)
    analysis_missing = models.BooleanField(default=False)
    judge_model = models.CharField(max_length=255, blank=True, default="")
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    cached_input_tokens = models.IntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True)
    score_spread = models.IntegerField(null=True, blank=True)
    input_coverage = models.FloatField(null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    # What the judge was sent and wrote, as a score's ``ScoreTranscript`` holds it.
    transcript = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "trial_scorings"
        ordering = ["trial", "session", "arm"]
        constraints = [
            models.UniqueConstraint(
                fields=["trial", "session", "arm"], name="one_trial_scoring_per_session_and_arm"
            ),
        ]
        indexes = [models.Index(fields=["status", "due_at_us"], name="trial_scorings_claim")]

    def __str__(self) -> str:
        return f"{self.arm} scoring of {self.session_id} ({self.status})"


class JudgePacing(models.Model):
    """When the next judge call to a model may start, shared by every worker process
    (``scoring.judge.pacing``): one row per model, changed in a transaction that holds it."""

    model = models.CharField(max_length=255, primary_key=True)
    # The provider said wait (429 with Retry-After) until then: every call to the model waits.
    not_before_us = models.BigIntegerField(default=0)
    # The known limits' token buckets: when the next request's, and the next prompt token's, turn comes.
    next_request_us = models.BigIntegerField(default=0)
    next_token_us = models.BigIntegerField(default=0)

    class Meta:
        db_table = "judge_pacing"


class JudgeTokenRatio(models.Model):
    """What the judge model's own count of a prompt is to ours, learned from its answers where
    neither its server nor litellm can count for it (``scoring.judge.tokens``): one row per
    model, the largest ratio seen, shared by every worker process."""

    model = models.CharField(max_length=255, primary_key=True)
    ratio = models.FloatField()
    # The answer it was learned from: the provider's prompt_tokens and our count of that prompt.
    provider_tokens = models.IntegerField()
    counted_tokens = models.IntegerField()
    learned_at_us = models.BigIntegerField()

    class Meta:
        db_table = "judge_token_ratio"


class JudgeCircuit(models.Model):
    """Circuit-breaker state for the judge LLM, shared by every worker process.

    One row per judge model. Kept in the database so that it holds across
    processes and hosts with no extra service, and updated with single
    conditional UPDATE statements so concurrent workers do not lose counts.
    """

    model = models.CharField(max_length=255, primary_key=True)
    consecutive_failures = models.IntegerField(default=0)
    opened_until_us = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "judge_circuit"


class ScoringEvent(models.Model):
    """One scoring event, stored so that clients can catch up on what they missed.

    The autoincrement id orders events and is the ``last_event_id`` of the
    WebSocket catchup. Rows older than ``SCORING_EVENT_RETENTION_S`` are pruned.
    The score and session are plain ids, not foreign keys: an event outlives
    nothing it points at and must not block deleting a session.
    """

    event_type = models.CharField(max_length=32)
    score_id = models.UUIDField()
    session_id = models.UUIDField()
    # Whether the event also goes to the global ``sessions`` channel (all but progress).
    on_sessions_channel = models.BooleanField()
    timestamp_us = models.BigIntegerField()
    # Type-specific fields (total_score, error_message, phase).
    fields = models.JSONField(default=dict)

    class Meta:
        db_table = "scoring_events"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["session_id", "id"], name="ix_scoring_events_session"),
            models.Index(fields=["on_sessions_channel", "id"], name="ix_scoring_events_sessions"),
            models.Index(fields=["timestamp_us"], name="ix_scoring_events_timestamp"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.id} of score {self.score_id}"


class ReviewVerdict(models.TextChoices):
    AGREE = "agree", "Agree"
    DISAGREE = "disagree", "Disagree"


# The longest note a review may carry (characters, after trimming): a note is shown beside the
# review on every page and answer that lists it (the agreement's largest differences too).
REVIEW_NOTE_MAX_CHARS = 10_000


class ScoreReview(models.Model):
    """A person's verdict on a completed judge score.

    Reviews sit beside the judge's output and never change it: they record
    whether a reviewer agrees, the score they would give, and why. Every
    review is kept, so a score can carry several (one per reviewer or revision).
    """

    score = models.ForeignKey(SessionScore, on_delete=models.CASCADE, related_name="reviews")
    # PROTECT: who said it is part of the record.
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="score_reviews"
    )
    verdict = models.CharField(max_length=16, choices=ReviewVerdict.choices)
    reviewer_score = models.IntegerField(help_text="The score (0-100) the reviewer would give.")
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "score_reviews"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["score", "verdict"], name="ix_score_reviews_score_verdict")]
        constraints = [
            models.CheckConstraint(
                condition=Q(reviewer_score__gte=0, reviewer_score__lte=100),
                name="ck_score_reviews_reviewer_score_range",
            ),
            models.CheckConstraint(
                condition=Q(verdict__in=["agree", "disagree"]), name="ck_score_reviews_verdict"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.verdict} ({self.reviewer_score}) on score {self.score_id}"


class WorkerHeartbeat(models.Model):
    """The last sign of life of one judge worker cluster (one ``scoring_worker`` process).

    Each cluster upserts its own row every 10 s (``scoring.ops.health``);
    ``/readyz`` and ``/metrics`` read them to tell whether any worker is alive.
    Rows of clusters gone for long are pruned.
    """

    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    cluster_name = models.CharField(max_length=255)
    last_seen_us = models.BigIntegerField(db_index=True)
    # Judge jobs the cluster's worker processes held at its last heartbeat
    # (scoring.jobs.runtime.HeldCounts); null when not known.
    in_flight = models.IntegerField(null=True, blank=True)

    class Meta:
        db_table = "worker_heartbeats"
        ordering = ["-last_seen_us"]
        constraints = [models.UniqueConstraint(fields=["host", "pid"], name="uq_worker_heartbeats_host_pid")]

    def __str__(self) -> str:
        return f"{self.cluster_name} on {self.host} (pid {self.pid})"


class TarsySync(models.Model):
    """The sync from one running TARSy (``scoring.tarsy.sync``): its lease and last outcome.

    One row per TARSy base URL. The lease (holder and expiry, taken and renewed
    by conditional UPDATEs) lets one sync of a TARSy run at a time across every
    process and host; one that dies leaves a lease that simply expires.
    """

    source = models.CharField(max_length=500, primary_key=True)
    lease_holder = models.CharField(max_length=255, blank=True, default="")
    lease_until_us = models.BigIntegerField(default=0)
    last_started_at_us = models.BigIntegerField(null=True, blank=True)
    # Start time of the last run that went through the whole list: everything
    # finished in TARSy before this moment is here.
    last_success_at_us = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_error_at_us = models.BigIntegerField(null=True, blank=True)
    # Go TARSy: the creation time from which the next run lists finished sessions
    # (scoring.tarsy_go.api); null: from the beginning. And when a run last listed them all.
    watermark_us = models.BigIntegerField(null=True, blank=True)
    last_full_pass_at_us = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "tarsy_sync"

    def __str__(self) -> str:
        return self.source


class TarsySyncedSession(models.Model):
    """What a sync last fetched of one session: the list fields that say whether
    it changed since (tarsy-bot: status, completion time, chat messages; Go TARSy: the
    ``fingerprint`` of its list entry), and why its document was rejected, if it was.
    The sync's cursor: a session whose list entry matches its row is not fetched again."""

    source = models.CharField(max_length=500)
    session_id = models.UUIDField()
    status = models.CharField(max_length=32)
    completed_at_us = models.BigIntegerField(null=True, blank=True)
    chat_message_count = models.IntegerField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    rejected_reason = models.TextField(blank=True, default="")
    synced_at_us = models.BigIntegerField()

    class Meta:
        db_table = "tarsy_synced_sessions"
        constraints = [
            models.UniqueConstraint(fields=["source", "session_id"], name="uq_tarsy_synced_sessions")
        ]

    def __str__(self) -> str:
        return f"{self.session_id} from {self.source}"
