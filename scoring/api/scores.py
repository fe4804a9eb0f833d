"""``/api/v1/scoring/sessions/{session_id}/score``: request and read a session's score.

Behaviour is EP-0028's "API Usage" section (the README links it), status table included.
"""

import uuid

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from scoring import selectors, services
from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.api.throttles import ScoreRequestThrottle
from scoring.models import AlertSession, ScoringStatus, SessionScore


class ScoreRequestSerializer(serializers.Serializer):
    force_rescore = serializers.BooleanField(
        default=False, help_text="Score again even if the session has a finished score."
    )


class ScoreSerializer(serializers.ModelSerializer):
    session_id = serializers.UUIDField(read_only=True)
    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "Instruction-like text found in the session's data (a possible prompt injection), "
            "one short description each, with where it was found. Empty when none was found."
        ),
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
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "warnings",
            "investigation_digest",
            "session_changed_since_score",
            "score_samples",
            "score_spread",
            "unstable",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "judge_model": {
                "help_text": "The judge model the worker that took the score used (litellm's name); kept "
                "when the score fails, empty only for a score failed before any worker took it."
            },
            "score_spread": {
                "help_text": "The highest sample score minus the lowest; null for one sample (or one "
                "that did not fail)."
            },
            "unstable": {
                "help_text": "Whether `score_spread` was over SCORING_UNSTABLE_SPREAD when the score was "
                "made: the judge's samples disagreed, so read the score with care."
            },
        }

    def get_current_prompt_used(self, score: SessionScore) -> bool:
        return selectors.is_current_criteria(score.prompt_hash)


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
_SCORE_ACCEPTED = ScoreAcceptedSerializer()

ConflictSerializer = inline_serializer(
    "ScoringConflict",
    {"detail": serializers.CharField(), "score_id": serializers.UUIDField(), "status": serializers.CharField()},
)
_ERRORS = {
    401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
    404: OpenApiResponse(DetailErrorSerializer, description="Session not found, or not scored yet (GET)."),
    500: OpenApiResponse(DetailErrorSerializer, description="Database error or scoring service failure."),
}


_SAMPLED_SCORE_EXAMPLE = {
    "score_id": "5b0f3c1e-7d2a-4c1b-9e3f-0a6d2b8c4e17",
    "session_id": "0f8e4d2c-1b3a-4e5f-8a7b-9c6d5e4f3a2b",
    "status": "completed",
    "prompt_hash": "9c1e6f0b2a7d4e8f3c5a1b9d7e2f4a6c8b0d1e3f5a7c9b2d4f6e8a0c1b3d5e7f",
    "total_score": 70,
    "score_analysis": "## Score breakdown\nLogical Flow: 18/25\nConsistency: 17/25\n...",
    "missing_tools_analysis": "1. **kubectl-events** - would have shown the eviction.",
    "error_message": None,
    "score_triggered_by": "alice",
    "scored_at_us": 1767225600000000,
    "started_at_us": 1767225600500000,
    "completed_at_us": 1767225648000000,
    "current_prompt_used": True,
    "judge_model": "openai/gpt-4o",
    "input_tokens": 38400,
    "output_tokens": 2900,
    "cost_usd": "0.1250000000",
    "warnings": [],
    "investigation_digest": "3f2a9c4e1d7b8a6f5e0c2d4b6a8f1e3c5d7b9a0e2f4c6d8b1a3e5f7c9d0b2a4e",
    "session_changed_since_score": False,
    "score_samples": [62, 70, 85],
    "score_spread": 23,
    "unstable": True,
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
        examples=[
            OpenApiExample(
                "An unstable score of three samples",
                value=_SAMPLED_SCORE_EXAMPLE,
                response_only=True,
                status_codes=["200"],
            )
        ],
    )
    def retrieve(self, request, session_id: str):
        parsed_id = _parse_session_id(session_id)
        score = selectors.latest_score(parsed_id)
        if score is None:
            if not selectors.session_exists(parsed_id):
                raise NotFound(selectors.no_such_session(parsed_id))
            raise NotFound(f"session {parsed_id} has not been scored yet")
        return Response(_SCORE.to_representation(score))

    @extend_schema(
        summary="Score the session",
        description=(
            "Starts scoring in the background and returns at once (202), or returns the existing "
            "score: a finished one (200) unless `force_rescore`, an active one (202) as it is. "
            "Forcing a re-score while one is active is a conflict (409). Only finished sessions "
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
            409: OpenApiResponse(ConflictSerializer, description="force_rescore while scoring is active."),
            429: OpenApiResponse(
                DetailErrorSerializer,
                description="Too many scoring requests from this user; retry after `Retry-After` seconds.",
            ),
            **_ERRORS,
        },
        examples=[OpenApiExample("Force a re-score", value={"force_rescore": True}, request_only=True)],
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
        return Response(_SCORE.to_representation(score), status=status.HTTP_200_OK)
