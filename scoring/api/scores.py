"""``/api/v1/scoring/sessions/{session_id}/score``: request and read a session's score;
``.../scores``: every scoring of it.

Behaviour is EP-0028's "API Usage" section (the README links it), status table included.
"""

import uuid

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    inline_serializer,
)
from rest_framework import generics, serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from scoring import budget, failures, selectors, services
from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.api.throttles import ScoreRequestThrottle
from scoring.judge.replies import DIMENSION_LABELS, DIMENSIONS, MAX_POINTS
from scoring.models import AlertSession, ScoringStatus, SessionScore


ERROR_MESSAGE_HELP = (
    "Why it failed; null unless failed. Staff get the error as recorded (a provider's own text "
    "included); anyone else a reason in this service's words (docs/scoring.md, \"Failure reasons\")."
)


class ScoreRequestSerializer(serializers.Serializer):
    force_rescore = serializers.BooleanField(
        default=False, help_text="Score again even if the session has a finished score."
    )
    confirm_over_budget = serializers.BooleanField(
        default=False,
        help_text=(
            "Score even though a spend budget (SCORING_BUDGET_USD_PER_DAY, SCORING_BUDGET_USD_PER_MONTH) "
            "is used up; without it such a request is refused with 409 and `over_budget`."
        ),
    )


DimensionsSerializer = type(
    "DimensionsSerializer",
    (serializers.Serializer,),
    {
        key: serializers.IntegerField(
            min_value=0,
            max_value=MAX_POINTS,
            allow_null=True,
            help_text=f"{DIMENSION_LABELS[key]}: points out of {MAX_POINTS}; null when the judge gave none.",
        )
        for key in DIMENSIONS
    },
)
DIMENSIONS_HELP = (
    f"The judge's points for each of the four criteria (0-{MAX_POINTS} each), read from its analysis "
    "(the breakdown the score prompt asks for); null when the analysis has none, or the score is not completed."
)
MISSING_TOOLS_HELP = (
    "The tools the judge's second turn says the investigation should have used, as the judge wrote "
    "them, in its order; empty when it named none, or the score is not completed."
)


class ScoreSerializer(serializers.ModelSerializer):
    session_id = serializers.UUIDField(read_only=True)
    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "What to check before trusting the score, one short description each; empty when nothing. "
            "Instruction-like text found in the session's data (a possible prompt injection), with where "
            "it was found; a line starting `score breakdown: ` when the judge's criteria breakdown "
            "lacks a criterion or does not add up to its total; a line starting `input shortened: ` when the "
            "investigation was cut to fit the judge's window; and a line starting `no evaluation: ` when the "
            "judge gave its score without the evaluation the criteria ask for (`analysis_missing`)."
        ),
    )
    dimensions = DimensionsSerializer(read_only=True, allow_null=True, help_text=DIMENSIONS_HELP)
    missing_tools = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="name", help_text=MISSING_TOOLS_HELP
    )
    investigation_digest = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text=(
            "SHA-256 of the canonical JSON of the session fields the judge read for this score "
            "(the fields rendered into its prompt); null for scores made before digests were kept."
        ),
    )
    session_changed_since_score = serializers.BooleanField(
        source="session_changed",
        read_only=True,
        allow_null=True,
        help_text=(
            "Whether the session was stored again with different content since this score judged it "
            "(TARSy appends chat follow-ups to finished sessions): true, false, or null when unknown "
            "(a score made before digests were kept). The score itself is kept either way."
        ),
    )
    current_prompt_used = serializers.SerializerMethodField(
        help_text="Whether the score was made with the judge prompts this service uses now."
    )
    score_samples = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=100, allow_null=True),
        read_only=True,
        allow_null=True,
        help_text=(
            "With SCORING_JUDGE_SAMPLES=k above 1: the score of each of the k turn-1 samples, in the "
            "order they were sampled (null for a sample that failed); `total_score` is their median "
            "(the lower middle one for an even count). Null for a score made from one sample."
        ),
    )

    class Meta:
        model = SessionScore
        fields = [
            "score_id",
            "session_id",
            "status",
            "prompt_hash",
            "total_score",
            "score_analysis",
            "missing_tools_analysis",
            "error_message",
            "score_triggered_by",
            "scored_at_us",
            "started_at_us",
            "completed_at_us",
            "current_prompt_used",
            "judge_model",
            "judge_temperature",
            "judge_seed",
            "analysis_missing",
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "cost_usd",
            "dimensions",
            "missing_tools",
            "warnings",
            "investigation_digest",
            "session_changed_since_score",
            "score_samples",
            "score_spread",
            "unstable",
            "input_coverage",
            "waiting_reason",
            "rate_limited_since_us",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "judge_model": {
                "help_text": "The judge model the worker that took the score used (litellm's name); kept "
                "when the score fails, empty only for a score failed before any worker took it."
            },
            "judge_temperature": {
                "help_text": "The temperature the judge calls sent (SCORING_LLM_TEMPERATURE); null when none was "
                "sent (the model takes only its default, or the score was made before it was sent). With "
                "`judge_model` and `judge_seed`, the judge's identity: the insights compare scores by it."
            },
            "judge_seed": {
                "help_text": "The seed the judge calls sent (SCORING_LLM_SEED); null when none was sent (the "
                "provider takes none, or the score was made before it was sent)."
            },
            "analysis_missing": {
                "help_text": "The judge gave its score without the evaluation the criteria ask for, even when "
                "asked once more: its second turn was not asked (`missing_tools_analysis` is null; true of "
                "scores made before then too, whose second turn was answered), and the insights leave it out "
                "unless asked to include it (docs/scoring.md, \"A score without an evaluation\")."
            },
            "missing_tools_analysis": {
                "help_text": "The judge's second turn, as written: the tools the investigation should have used. "
                "Null until the score completes, and for a score whose judge gave no evaluation "
                "(`analysis_missing`): the second turn was not asked."
            },
            "cached_input_tokens": {
                "help_text": "Of `input_tokens`, those the provider served from its prompt cache (turn 2 "
                "rereading turn 1); `cost_usd` has their discount. Null for a score made before it was "
                "recorded."
            },
            "score_spread": {
                "help_text": "The highest sample score minus the lowest; null for one sample (or one "
                "that did not fail)."
            },
            "unstable": {
                "help_text": "Whether `score_spread` was over SCORING_UNSTABLE_SPREAD when the score was "
                "made: the judge's samples disagreed, so read the score with care."
            },
            "input_coverage": {
                "help_text": "The share of the investigation's text the judge saw, 0 to 1: below 1 when the "
                "middle of long tool results was cut to fit the judge model's context window (the warning "
                "starting \"input shortened: \" in `warnings` names them); kept by a score that failed after "
                "its prompt was fitted; null before that."
            },
            "waiting_reason": {
                "help_text": "Why a pending score waits before a worker takes it: the judge provider's "
                "quota (HTTP 429) said to come back later (`rate_limited_since_us` is set), or, for an "
                "automatic scoring, a spend budget is used up until its day or month ends "
                "(`rate_limited_since_us` is null); `started_at_us` is then when it is due. Empty when it "
                "is not waiting."
            },
            "error_message": {"help_text": ERROR_MESSAGE_HELP},
            "rate_limited_since_us": {
                "help_text": "When the judge provider's quota first held this scoring back; it fails once "
                "it has waited SCORING_RATE_LIMIT_PATIENCE_S from then. Null if it never was, or if it "
                "waited for the spend budget since (which starts the quota's patience over)."
            },
        }

    def get_current_prompt_used(self, score: SessionScore) -> bool:
        return score.criteria_current  # selectors.latest_score and score_history annotate it


class ScoreAcceptedSerializer(serializers.ModelSerializer):
    session_id = serializers.UUIDField(read_only=True)

    class Meta:
        model = SessionScore
        fields = ["score_id", "session_id", "status"]
        read_only_fields = fields


# A ModelSerializer builds its fields each time one is created: about 1 ms per response,
# more than the query. The fields hold nothing of a request, so one instance of each
# serves every response (to_representation reads only its argument).
_SCORE = ScoreSerializer()


def score_for(user, score: SessionScore) -> dict:
    """A score as ``user`` may read it: its error as recorded for staff, else a reason."""
    data = _SCORE.to_representation(score)
    data["error_message"] = failures.for_caller(data["error_message"], user)
    return data
_SCORE_ACCEPTED = ScoreAcceptedSerializer()

COMPLETED_SCORE_EXAMPLE = OpenApiExample(
    "A completed score of three judge samples",
    response_only=True,
    status_codes=["200"],
    value={
        "score_id": "0b6f3c1e-8a4d-4f1b-9a57-2c1d9e7b5a10",
        "session_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "status": "completed",
        "prompt_hash": "3f5a" + "0" * 60,
        "total_score": 70,
        "score_analysis": "The agent listed the pods ... however, it never read the crashed container's "
        "logs ...\n\n**Score breakdown:**\n* Logical Flow: 16/25\n* Consistency: 15/25\n"
        "* Tool Relevance: 13/25\n* Synthesis Quality: 14/25",
        "missing_tools_analysis": "1. **kubectl-logs**: the previous container's output ...\n"
        "2. **kubectl-get-events**: why the kubelet killed it ...",
        "error_message": None,
        "score_triggered_by": "alice",
        "scored_at_us": 1763900000000000,
        "started_at_us": 1763900000500000,
        "completed_at_us": 1763900042000000,
        "current_prompt_used": True,
        "judge_model": "gemini/gemini-2.5-pro",
        "judge_temperature": 0.0,
        "judge_seed": 0,
        "analysis_missing": False,
        "input_tokens": 18500,
        "output_tokens": 1240,
        "cached_input_tokens": 4800,
        "cost_usd": "0.0301250000",
        "dimensions": {"logical_flow": 16, "consistency": 15, "tool_relevance": 13, "synthesis_quality": 14},
        "missing_tools": ["kubectl-logs", "kubectl-get-events"],
        "warnings": [
            "score breakdown: the four criteria add up to 58, not to the total score 70",
            "input shortened: the judge saw 31% of the investigation: the middle of 1 tool result was left out "
            "to fit the judge model's context window of 128,000 tokens: kubernetes-server.pods_log (2.1 MB of 3.0 MB)",
        ],
        "investigation_digest": "9d2c" + "0" * 60,
        "session_changed_since_score": False,
        "score_samples": [62, 70, 85],
        "score_spread": 23,
        "unstable": True,
        "input_coverage": 0.31,
        "waiting_reason": "",
        "rate_limited_since_us": None,
    },
)

ConflictSerializer = inline_serializer(
    "ScoringConflict",
    {"detail": serializers.CharField(), "score_id": serializers.UUIDField(), "status": serializers.CharField()},
)
OverBudgetSerializer = inline_serializer(
    "ScoringOverBudget",
    {
        "detail": serializers.CharField(help_text="Which budget is used up, and what was spent."),
        "over_budget": serializers.BooleanField(
            help_text="Always true: send the request again with `confirm_over_budget` to score anyway."
        ),
    },
)
_ERRORS = {
    401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
    404: OpenApiResponse(DetailErrorSerializer, description="Session not found, or not scored yet (GET)."),
    500: OpenApiResponse(DetailErrorSerializer, description="Database error or scoring service failure."),
}


def _parse_session_id(raw: str) -> uuid.UUID:
    try:
        return selectors.session_key(raw)
    except AlertSession.DoesNotExist as exc:
        raise NotFound(str(exc)) from None


class SessionScoreViewSet(viewsets.ViewSet):
    """Request and read the judge's score of one TARSy session."""

    def get_throttles(self):
        # Only requesting a scoring is limited: reading scores costs no judge call.
        return [ScoreRequestThrottle()] if self.action == "create" else []

    @extend_schema(
        summary="Get the session's score",
        description="The newest scoring of the session, whatever its status.",
        responses={200: ScoreSerializer, **_ERRORS},
        examples=[COMPLETED_SCORE_EXAMPLE],
    )
    def retrieve(self, request, session_id: str):
        parsed_id = _parse_session_id(session_id)
        score = selectors.latest_score(parsed_id)
        if score is None:
            if not selectors.session_exists(parsed_id):
                raise NotFound(selectors.no_such_session(parsed_id))
            raise NotFound(f"session {parsed_id} has not been scored yet")
        return Response(score_for(request.user, score))

    @extend_schema(
        summary="Score the session",
        description=(
            "Starts scoring in the background and returns at once (202), or returns the existing "
            "score: a finished one (200) unless `force_rescore`, an active one (202) as it is. "
            "Forcing a re-score while one is active is a conflict (409), and so is a new scoring while "
            "a spend budget is used up, unless `confirm_over_budget` (docs/scoring.md, \"Cost controls\"). "
            "Only finished sessions "
            "(completed, failed, cancelled, timed_out) can be scored (else 400). Follow progress "
            "on the WebSocket or by polling GET."
        ),
        request=ScoreRequestSerializer,
        responses={
            200: OpenApiResponse(ScoreSerializer, description="The session's finished score."),
            202: OpenApiResponse(ScoreAcceptedSerializer, description="Scoring queued or under way."),
            400: field_errors(
                "Session not finished (a `detail` saying so), or a bad body (its messages by field too).",
                {"force_rescore": ["Must be a valid boolean."]},
            ),
            409: OpenApiResponse(
                PolymorphicProxySerializer(
                    component_name="ScoreRequestConflict",
                    serializers=[ConflictSerializer, OverBudgetSerializer],
                    resource_type_field_name=None,
                ),
                description=(
                    "`force_rescore` while scoring is active (with the active `score_id` and `status`); or a "
                    "spend budget is used up and `confirm_over_budget` was not sent (with `over_budget`)."
                ),
            ),
            429: OpenApiResponse(
                DetailErrorSerializer,
                description="Too many scoring requests from this user; retry after `Retry-After` seconds.",
            ),
            **_ERRORS,
        },
        examples=[
            OpenApiExample("Force a re-score", value={"force_rescore": True}, request_only=True),
            OpenApiExample(
                "Score past a used-up budget", value={"confirm_over_budget": True}, request_only=True
            ),
        ],
    )
    def create(self, request, session_id: str):
        parsed_id = _parse_session_id(session_id)
        body = ScoreRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            score, _ = services.score_request(
                session_id=parsed_id,
                triggered_by=request.user.get_username(),
                force_rescore=body.validated_data["force_rescore"],
                confirm_over_budget=body.validated_data["confirm_over_budget"],
            )
        except budget.OverBudget as exc:
            return Response(
                {"detail": f"{exc}; send confirm_over_budget=true to score anyway", "over_budget": True},
                status=status.HTTP_409_CONFLICT,
            )
        except services.SessionNotFound as exc:
            raise NotFound(str(exc)) from None
        except services.SessionNotScorable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except services.ScoringInProgress as exc:
            return Response(
                {"detail": str(exc), "score_id": exc.score.score_id, "status": exc.score.status},
                status=status.HTTP_409_CONFLICT,
            )
        if score.status in ScoringStatus.active_values():
            return Response(_SCORE_ACCEPTED.to_representation(score), status=status.HTTP_202_ACCEPTED)
        return Response(score_for(request.user, score), status=status.HTTP_200_OK)


class SessionScoreHistoryView(generics.ListAPIView):
    """Every scoring of one session, newest first."""

    # Used only to describe the list in the schema; reads go through selectors.
    queryset = SessionScore.objects.none()
    serializer_class = ScoreSerializer

    @extend_schema(
        summary="List the session's scorings, newest first",
        description=(
            "Every scoring of the session, whatever its status: re-scores and failed attempts too "
            "(a re-score adds a scoring, it never replaces one), 50 a page. An existing session never "
            "scored has an empty list."
        ),
        examples=[COMPLETED_SCORE_EXAMPLE],
        responses={
            200: ScoreSerializer(many=True),
            **_ERRORS,
            404: OpenApiResponse(DetailErrorSerializer, description="No session with this id (or it is not a UUID)."),
        },
    )
    def get(self, request, session_id: str):
        parsed_id = _parse_session_id(session_id)
        if not selectors.session_exists(parsed_id):
            raise NotFound(selectors.no_such_session(parsed_id))
        page = self.paginate_queryset(selectors.score_history(parsed_id))
        return self.get_paginated_response([score_for(request.user, score) for score in page])
