"""``/api/v1/scoring/reports/``: request an MCP prioritization report and read it
(``scoring.insights.reports``; docs/insights.md)."""

import uuid

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring import failures
from scoring.api.errors import DetailErrorSerializer
from scoring.api.insights import filter_fields
from scoring.api.throttles import ScoreRequestThrottle
from scoring.insights import reports
from scoring.insights.filters import FILTER_PARAMS, InvalidFilter, parse_filters
from scoring.models import InsightReport

REPORT_ID = "2f1c7a52-3b0e-4c55-9a8e-6f0f3d1b7e21"
SCORE_ID = "0b6f9d8e-51a2-4d7c-8f3e-2a9c4e7d1b05"

# The body of a report request: the insight filters, described where their query parameters are.
ReportRequestSerializer = type(
    "ReportRequestSerializer",
    (serializers.Serializer,),
    {"__doc__": "The insight filters (docs/insights.md), all optional.", **filter_fields()},
)


class ReportAcceptedSerializer(serializers.ModelSerializer):
    class Meta:
        model = InsightReport
        fields = ["report_id", "status"]
        read_only_fields = fields


class ReportSerializer(serializers.ModelSerializer):
    filters = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The filters it covers, as given (unset ones left out).",
    )
    score_ids = serializers.ListField(
        child=serializers.UUIDField(),
        read_only=True,
        help_text="The scores whose missing-tools analyses it read: each selected session's newest completed "
        "score with one, the newest SCORING_REPORT_MAX_SCORES.",
    )

    class Meta:
        model = InsightReport
        fields = [
            "report_id",
            "status",
            "report",
            "filters",
            "score_ids",
            "requested_by",
            "requested_at_us",
            "started_at_us",
            "completed_at_us",
            "judge_model",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "rounds",
            "error_message",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "report": {"help_text": "The report (Markdown, as the judge wrote it); null until completed."},
            "rounds": {
                "help_text": "Passes over the inputs: 1 when they fit one judge call, more when parts were "
                "summarised first."
            },
            "input_tokens": {"help_text": "Tokens sent, over all its judge calls."},
            "output_tokens": {"help_text": "Tokens received, over all its judge calls."},
            "cost_usd": {"help_text": "Cost of its judge calls; null when litellm does not know the model's price."},
            "error_message": {
                "help_text": "Why it failed; null unless failed. Staff get the error as recorded (a "
                "provider's own text included); anyone else a reason in this service's words."
            },
        }


_ACCEPTED = ReportAcceptedSerializer()
_REPORT = ReportSerializer()

_EXAMPLE_REPORT = {
    "report_id": REPORT_ID,
    "status": "completed",
    "report": "## Build first\n\n1. **Pod logs (kubectl-logs, previous container)**: missing in 31 of 52 "
    "sessions (kubernetes, 27; ...)",
    "filters": {"since": "2026-01-01T00:00:00Z", "alert_type": "kubernetes"},
    "score_ids": [SCORE_ID],
    "requested_by": "alice",
    "requested_at_us": 1767225600000000,
    "started_at_us": 1767225600400000,
    "completed_at_us": 1767225648000000,
    "judge_model": "openai/gpt-4o-mini",
    "input_tokens": 48210,
    "output_tokens": 1530,
    "cost_usd": "0.0081500000",
    "rounds": 1,
    "error_message": None,
}
_ERRORS = {
    401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
    500: OpenApiResponse(DetailErrorSerializer, description="Database error."),
}


class ReportListView(APIView):
    """Request an MCP prioritization report."""

    throttle_classes = [ScoreRequestThrottle]  # each report costs judge calls, as a scoring does

    @extend_schema(
        summary="Write an MCP prioritization report",
        description=(
            "Queues a report (202): the judge model reads the missing-tools analyses of the selected "
            "sessions' newest completed scores and writes which tools or MCP servers to build first, "
            "why, the evidence and the expected effect. Poll GET .../reports/{report_id} until it is "
            "completed or failed. A request that an existing report answers gets that one (202 with "
            "its id and status, whatever the status): a report on the same filters pending or in "
            "progress, or one that reads the same scores with the same judge model, pending, in "
            "progress, or completed within SCORING_REPORT_REUSE_S. 400 when a filter cannot be read "
            "or no selected score has a missing-tools analysis; 429 when the user has queued "
            "SCORING_REPORT_RATE reports (or made SCORING_POST_RATE scoring and report requests)."
        ),
        request=ReportRequestSerializer,
        responses={
            202: OpenApiResponse(
                ReportAcceptedSerializer, description="Report queued, or the existing report that answers it."
            ),
            400: OpenApiResponse(DetailErrorSerializer, description="A bad filter, or nothing to report on."),
            429: OpenApiResponse(
                DetailErrorSerializer,
                description="Too many reports (SCORING_REPORT_RATE), or scoring and report requests "
                "(SCORING_POST_RATE), from this user; retry after `Retry-After` seconds.",
            ),
            **_ERRORS,
        },
        examples=[
            OpenApiExample(
                "Kubernetes alerts since January",
                value={"since": "2026-01-01", "alert_type": "kubernetes"},
                request_only=True,
            ),
            OpenApiExample(
                "Queued", value={"report_id": REPORT_ID, "status": "pending"}, response_only=True, status_codes=["202"]
            ),
            OpenApiExample(
                "Nothing to report on",
                value={
                    "detail": "no completed score with a missing-tools analysis matches these filters "
                    "(alert_type kubernetes): score some sessions first, or widen the filters"
                },
                response_only=True,
                status_codes=["400"],
            ),
        ],
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            return Response({"detail": "the body must be a JSON object of filters"}, status=status.HTTP_400_BAD_REQUEST)
        unknown = sorted(set(request.data) - set(FILTER_PARAMS))
        if unknown:
            # A misspelt filter would otherwise pay for a report on everything.
            return Response(
                {"detail": f"unknown filter {', '.join(unknown)}: the filters are {', '.join(FILTER_PARAMS)}"},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            filters = parse_filters({name: str(value) for name, value in request.data.items() if value is not None})
            report = reports.request_report(filters, request.user.get_username())
        except (InvalidFilter, reports.NoReportInputs) as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except reports.TooManyReports as exc:
            raise Throttled(wait=exc.retry_after_s, detail=str(exc)) from None
        return Response(_ACCEPTED.to_representation(report), status=status.HTTP_202_ACCEPTED)


class ReportDetailView(APIView):
    """Read an MCP prioritization report."""

    @extend_schema(
        summary="Get an MCP prioritization report",
        description="Its status, the report once completed (or the error once failed), its inputs, model, "
        "tokens and cost.",
        responses={
            200: ReportSerializer,
            404: OpenApiResponse(DetailErrorSerializer, description="No report with this id."),
            **_ERRORS,
        },
        examples=[OpenApiExample("Completed", value=_EXAMPLE_REPORT, response_only=True)],
    )
    def get(self, request, report_id: str):
        try:
            key = uuid.UUID(report_id)
        except ValueError:
            key = None
        report = reports.get_report(key) if key is not None else None
        if report is None:
            raise NotFound(f"report {report_id} not found")
        data = _REPORT.to_representation(report)
        data["error_message"] = failures.for_caller(data["error_message"], request.user, report=True)
        return Response(data)
