"""The sessions API: TARSy sends sessions (a user in SESSION_WRITERS or with the change
permission); anyone signed in reads them."""

from drf_spectacular.utils import (
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from scoring import failures, selectors, services
from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.api.permissions import SessionWriteAllowed
from scoring.api.scores import (
    DIMENSIONS_HELP,
    ERROR_MESSAGE_HELP,
    MISSING_TOOLS_HELP,
    DimensionsSerializer,
)
from scoring.models import AlertSession, ScoringStatus, SessionSource, SessionStatus
from scoring.tarsy.documents import InvalidSession
from scoring.tarsy_bot.document import STATUS_ERROR
from scoring.tarsy_go import document as tarsy_go_document

# What Go TARSy has of its own (``SourceFields``).
SOURCE_FIELDS = ["tarsy_judge", "tarsy_review", "tarsy_dashboard_url"]
SUMMARY_FIELDS = [
    "session_id",
    "source",
    "alert_type",
    "agent_type",
    "chain_id",
    "status",
    "author",
    "runbook_url",
    "started_at_us",
    "completed_at_us",
    "error_message",
    "alert_data",
    "final_analysis",
    "final_analysis_summary",
    "alert_title",
    "alert_summary",
    "investigation_bytes",
    "imported_at",
    "updated_at",
    *SOURCE_FIELDS,
]
# Computed here, never sent by TARSy: read-only also keeps them out of the request schema.
COMPUTED_FIELDS = ["source", "investigation_bytes", "imported_at", "updated_at", *SOURCE_FIELDS]


class AlertHeadingFields(serializers.Serializer):
    """What tells sessions apart (``AlertSession.heading``), computed from TARSy's fields."""

    alert_title = serializers.CharField(
        source="heading.title",
        read_only=True,
        help_text="The alert's name from its data (alertname, alert_name, alert or labels.alertname), "
        "or the session's alert_type when the data names none.",
    )
    alert_summary = serializers.CharField(
        source="heading.summary",
        read_only=True,
        help_text="One line (at most 160 characters) saying what the alert is about: the alert's own "
        "text (message, summary or description, also under annotations), else final_analysis_summary, "
        "else its first few fields (`namespace: payments · pod: ...`); empty when there is nothing.",
    )


class TarsyJudgeSerializer(serializers.Serializer):
    """Go TARSy's own judge's score of the session: another judge's, never this service's."""

    total_score = serializers.IntegerField(source="source_score_total", help_text="0-100.")
    prompt_hash = serializers.CharField(
        source="source_score_prompt_hash", help_text="The SHA256 of Go TARSy's judge prompts."
    )
    model = serializers.CharField(
        source="source_score_model", help_text="The model of its scoring stage; empty when unknown."
    )
    failure_tags = serializers.ListField(child=serializers.CharField(), source="source_score_failure_tags")
    scored_at_us = serializers.IntegerField(source="source_scored_at_us", allow_null=True)

    def get_attribute(self, instance):
        return instance if instance.source_score_total is not None else None


class TarsyReviewSerializer(serializers.Serializer):
    """Go TARSy's reviewers' verdict on the session (TARSy's review workflow)."""

    review_status = serializers.CharField(
        source="source_review_status", help_text="needs_review, in_progress or reviewed (as TARSy says)."
    )
    quality_rating = serializers.CharField(
        source="source_quality_rating",
        help_text="accurate, partially_accurate or inaccurate; empty until a reviewer rated it.",
    )
    action_taken = serializers.CharField(source="source_action_taken")
    investigation_feedback = serializers.CharField(source="source_investigation_feedback")
    reviewer = serializers.CharField(source="source_reviewer", help_text="Who completed the review.")
    reviewed_at_us = serializers.IntegerField(source="source_reviewed_at_us", allow_null=True)

    def get_attribute(self, instance):
        return instance if instance.source_review_status or instance.source_quality_rating else None


class SourceFields(serializers.Serializer):
    """Where the session came from, and what Go TARSy's judge and reviewers said of it."""

    source = serializers.ChoiceField(
        choices=SessionSource.choices,
        read_only=True,
        help_text="Which TARSy the session came from: tarsy-bot (the Python TARSy) or tarsy-go.",
    )
    tarsy_judge = TarsyJudgeSerializer(
        read_only=True,
        allow_null=True,
        help_text="Go TARSy's own judge's score (Go sessions it scored); null otherwise.",
    )
    tarsy_review = TarsyReviewSerializer(
        read_only=True,
        allow_null=True,
        help_text="Go TARSy's reviewers' verdict (Go sessions in its review workflow); null otherwise.",
    )
    tarsy_dashboard_url = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The session's page in Go TARSy's dashboard (TARSY_DASHBOARD_URL); null when unknown.",
    )


class SessionSummarySerializer(AlertHeadingFields, SourceFields, serializers.ModelSerializer):
    """A session without its investigation."""

    class Meta:
        model = AlertSession
        fields = SUMMARY_FIELDS
        read_only_fields = SUMMARY_FIELDS


class LatestScoreSerializer(serializers.Serializer):
    """The newest score of a session, from the copy its row keeps (``AlertSession.latest_*``):
    a list answers it with no request, or query, per session."""

    score_id = serializers.UUIDField(source="latest_score_id")
    status = serializers.ChoiceField(choices=ScoringStatus.choices, source="latest_status")
    total_score = serializers.IntegerField(
        source="latest_total_score", allow_null=True, help_text="0-100; null unless completed."
    )
    band = serializers.SerializerMethodField()
    current_prompt_used = serializers.SerializerMethodField(
        help_text="Whether the score was made with the judge prompts this service uses now."
    )
    error_message = serializers.CharField(
        source="latest_error_message", allow_null=True, help_text=ERROR_MESSAGE_HELP
    )
    dimensions = DimensionsSerializer(source="latest_dimensions", allow_null=True, help_text=DIMENSIONS_HELP)
    missing_tools = serializers.ListField(
        child=serializers.CharField(), source="latest_missing_tools", help_text=MISSING_TOOLS_HELP
    )

    def get_attribute(self, instance):
        return instance if instance.latest_score_id is not None else None

    @extend_schema_field(
        serializers.ChoiceField(
            choices=[band.key for band in selectors.SCORE_BANDS],
            allow_null=True,
            help_text="The total's band: poor 0-49, weak 50-74, good 75-100; null unless completed.",
        )
    )
    def get_band(self, session: AlertSession) -> str | None:
        band = selectors.band_of(session.latest_total_score)
        return band.key if band else None

    def get_current_prompt_used(self, session: AlertSession) -> bool:
        return session.criteria_current  # selectors.session_list annotates it


class SessionListItemSerializer(SessionSummarySerializer):
    """A session of the list: its summary and its newest score."""

    latest_score = LatestScoreSerializer(
        source="*",
        read_only=True,
        allow_null=True,
        help_text="The session's newest score, whatever its status; null when it was never scored. "
        "GET /api/v1/scoring/sessions/{session_id}/score has the whole score.",
    )

    class Meta(SessionSummarySerializer.Meta):
        fields = SUMMARY_FIELDS + ["latest_score"]
        read_only_fields = fields


class StoredObjectsField(serializers.ListField):
    """A list of JSON objects, answered as stored. DRF's ListField/DictField copy every
    item and key: seconds of CPU for a session of 100,000 stages, for the same value."""

    def to_representation(self, value):
        return value


class SessionDetailSerializer(AlertHeadingFields, SourceFields, serializers.ModelSerializer):
    """A whole session, as TARSy's history API returns it (fields this service keeps).

    It also describes the POST body in the schema; the body itself is validated
    by ``scoring.tarsy_bot.document``, whose errors name the JSON path of each bad value.
    """

    stages = StoredObjectsField(
        child=serializers.DictField(),
        help_text=(
            "TARSy stage executions, each with execution_id, stage_name, stage_index, "
            "llm_interactions (each with details.conversation.messages: [{role, content}]), "
            "mcp_communications (each with details.server_name and details.communication_type) "
            "and parallel_executions (null, or a list of child stages). Other keys are kept as sent."
        ),
    )
    session_level_interactions = StoredObjectsField(
        child=serializers.DictField(),
        required=False,
        help_text="Interactions outside any stage (like the executive summary), of type 'llm' or 'mcp'.",
    )
    source_document = serializers.JSONField(
        read_only=True,
        help_text="A Go TARSy session's investigation: the document assembled from Go TARSy's API answers "
        "(the shape of TarsyGoSessionDocument); null for a tarsy-bot session, whose investigation is in "
        "stages and session_level_interactions.",
    )
    ingest_notes = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "What this service had to change to store the session, one sentence each; empty when it is "
            "stored exactly as sent. NUL characters (\\u0000), which the database cannot store, are "
            "replaced with U+FFFD, and a note says how many and where (JSON paths)."
        ),
    )

    class Meta:
        model = AlertSession
        fields = SUMMARY_FIELDS + ["stages", "session_level_interactions", "source_document", "ingest_notes"]
        read_only_fields = COMPUTED_FIELDS
        extra_kwargs = {"alert_data": {"required": True}}


class TarsyGoSessionDocumentSerializer(serializers.Serializer):
    """A Go TARSy session, as POSTed: its API's answers assembled, each exactly as Go TARSy gave it
    (docs/sync.md, "The Go TARSy document"). Validated by ``scoring.tarsy_go.document``."""

    format = serializers.ChoiceField(choices=[tarsy_go_document.FORMAT], help_text="The document's format.")
    session = serializers.DictField(help_text="GET /api/v1/sessions/{id}: the session detail.")
    timeline = serializers.ListField(
        child=serializers.DictField(), help_text="GET /api/v1/sessions/{id}/timeline: its events."
    )
    trace = serializers.DictField(help_text="GET /api/v1/sessions/{id}/trace: the interactions' list.")
    llm_interactions = serializers.DictField(
        child=serializers.DictField(),
        help_text="Each LLM interaction's GET .../trace/llm/{interaction_id}, by its id.",
    )
    mcp_interactions = serializers.DictField(
        child=serializers.DictField(),
        help_text="Each MCP interaction's GET .../trace/mcp/{interaction_id}, by its id.",
    )
    score = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="GET /api/v1/sessions/{id}/score: Go TARSy's own judge's score; null when it has none.",
    )
    review_activity = serializers.DictField(
        required=False, allow_null=True, help_text="GET /api/v1/sessions/{id}/review-activity."
    )


SESSION_DOCUMENT = PolymorphicProxySerializer(
    component_name="SessionDocument",
    serializers=[SessionDetailSerializer, TarsyGoSessionDocumentSerializer],
    resource_type_field_name=None,
)


class SessionListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=SessionStatus.choices,
        required=False,
        allow_blank=True,
        error_messages={"invalid_choice": STATUS_ERROR},
        help_text="Only sessions with this TARSy status.",
    )
    alert_type = serializers.CharField(
        required=False, allow_blank=True, help_text="Only sessions of this alert type."
    )


INVALID_SESSION = field_errors(
    "The body is not a TARSy session: messages for each bad value, keyed by its JSON path, and "
    "all of them in `detail` (if the body is not JSON at all, only a `detail` with the parser's message).",
    {
        "status": [STATUS_ERROR.format(input="running")],
        "stages[2].llm_interactions[0].details.conversation": [
            'This field is required (an object with a "messages" list or null).'
        ],
    },
)
INVALID_FILTER = field_errors(
    "A filter has a value no session can have.", {"status": [STATUS_ERROR.format(input="running")]}
)


NOT_SIGNED_IN = OpenApiResponse(DetailErrorSerializer, description="No credentials, or invalid ones.")
NO_SUCH_SESSION = OpenApiResponse(
    DetailErrorSerializer, description="No session with this id (or the id is not a UUID)."
)
NOT_A_WRITER = OpenApiResponse(
    DetailErrorSerializer,
    description=f"The user may not store sessions: that needs {services.SESSION_WRITERS_RULE} "
    "(TARSy's service account).",
)
NOT_JSON = OpenApiResponse(DetailErrorSerializer, description="The body is not sent as application/json.")


@extend_schema_view(
    list=extend_schema(
        summary="List sessions, newest first",
        parameters=[SessionListQuerySerializer],
        responses={200: SessionListItemSerializer(many=True), 400: INVALID_FILTER, 401: NOT_SIGNED_IN},
    ),
    retrieve=extend_schema(
        summary="One whole session, with its investigation",
        responses={200: SessionDetailSerializer, 401: NOT_SIGNED_IN, 404: NO_SUCH_SESSION},
    ),
    create=extend_schema(
        summary="Store one TARSy session (new or updated)",
        description="The body is a tarsy-bot session as its `GET /api/v1/history/sessions/{id}` returns "
        "it, or a Go TARSy session document (`format: tarsy-go/1`: its API's answers assembled, "
        "docs/sync.md). "
        "Only for TARSy: users with the `scoring.change_alertsession` permission or named in "
        "`SESSION_WRITERS`. Sending a session again replaces it (its scores stay; each score's "
        "`session_changed_since_score` says whether the session differs from what it judged), or "
        "leaves it alone when its content is unchanged; every write is recorded with the user's name. "
        "NUL characters (\\u0000), which the database cannot "
        "store, are stored as U+FFFD and noted in the session's `ingest_notes`.",
        request=SESSION_DOCUMENT,
        responses={
            201: OpenApiResponse(SessionSummarySerializer, description="The session was new."),
            200: OpenApiResponse(
                SessionSummarySerializer,
                description="The session existed: replaced, or left as it was (`updated_at` too) when "
                "the body has the content already stored.",
            ),
            400: INVALID_SESSION,
            401: NOT_SIGNED_IN,
            403: NOT_A_WRITER,
            415: NOT_JSON,
        },
    ),
)
class SessionViewSet(viewsets.GenericViewSet):
    lookup_field = "session_id"
    # Used only to type the path parameter in the schema; reads go through selectors.
    queryset = AlertSession.objects.none()
    serializer_class = SessionDetailSerializer
    # Form-encoded bodies cannot carry a session: answer 415, not field errors.
    parser_classes = [JSONParser]
    permission_classes = [IsAuthenticated, SessionWriteAllowed]

    def list(self, request):
        query = SessionListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        sessions = selectors.session_list(
            status=query.validated_data.get("status") or None,
            alert_type=query.validated_data.get("alert_type") or None,
        )
        page = selectors.with_latest_missing_tools(self.paginate_queryset(sessions))
        items = SessionListItemSerializer(page, many=True).data
        for item in items:
            if item["latest_score"] is not None:
                latest = item["latest_score"]
                latest["error_message"] = failures.for_caller(latest["error_message"], request.user)
        return self.get_paginated_response(items)

    def retrieve(self, request, session_id=None):
        try:
            session = selectors.get_session(session_id)
        except AlertSession.DoesNotExist as exc:
            raise NotFound(str(exc)) from exc
        return Response(SessionDetailSerializer(session).data)

    def create(self, request):
        try:
            session, outcome = services.ingest_session(request.data, written_by=request.user.get_username())
        except InvalidSession as exc:
            raise ValidationError(exc.errors) from exc
        return Response(
            SessionSummarySerializer(session).data,
            status=(
                status.HTTP_201_CREATED if outcome is services.IngestOutcome.CREATED else status.HTTP_200_OK
            ),
        )
