"""``/api/v1/scoring/stats/`` and ``/api/v1/scoring/missing-tools/``: the fleet statistics
and the missing-tools backlog over the insight filters (docs/insights.md). The figures are
computed by ``scoring.insights``; these views parse the query and answer."""

import csv
import io

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import renderers, serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from scoring import selectors
from scoring.api.errors import DetailErrorSerializer
from scoring.insights.backlog import missing_tools_backlog
from scoring.insights.filters import FILTER_PARAMS, InvalidFilter, parse_filters
from scoring.insights.stats import DIMENSIONS, GROUPINGS, InvalidGrouping, fleet_stats

# What each insight filter selects: the query parameters of the insight endpoints and the
# body of a report request are both made from it (parsed by ``parse_filters``, one rule).
FILTER_DESCRIPTIONS = {
    "since": "Only sessions that started at or after this ISO 8601 date or date-time (UTC unless "
    "an offset is given), e.g. `2026-01-01`.",
    "until": "Only sessions that started before this date or date-time.",
    "alert_type": "Only sessions of this alert type.",
    "chain_id": "Only sessions of this agent chain.",
    "prompt_hash": "Only scores made under this criteria hash.",
    "include_analysis_missing": "`true` to count the scores whose judge gave no evaluation with its score, even "
    "when asked once more (`analysis_missing`): left out by default (docs/insights.md).",
}
FILTER_PARAMETERS = [
    OpenApiParameter(name, OpenApiTypes.STR, description=FILTER_DESCRIPTIONS[name]) for name in FILTER_PARAMS
]


def filter_fields() -> dict:
    """The same filters as the optional fields of a JSON object (a serializer's declared fields)."""
    return {
        name: serializers.CharField(required=False, help_text=FILTER_DESCRIPTIONS[name]) for name in FILTER_PARAMS
    }


NOT_SIGNED_IN = OpenApiResponse(DetailErrorSerializer, description="No credentials, or invalid ones.")


def bad_query(description: str, message: str) -> OpenApiResponse:
    return OpenApiResponse(
        DetailErrorSerializer,
        description=description,
        examples=[OpenApiExample("Bad parameter", value={"detail": message})],
    )


def _refused(exc: Exception) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)


# --- Fleet statistics ----------------------------------------------------------------------------

BANDS = inline_serializer(
    "ScoreBandCounts",
    {
        band.key: serializers.IntegerField(
            help_text=f"Sessions scored {band.low}-{band.high} ({band.meaning})."
        )
        for band in selectors.SCORE_BANDS
    },
)
DIMENSION_MEANS = inline_serializer(
    "DimensionMeans",
    {
        name: serializers.FloatField(
            allow_null=True, help_text="Mean points out of 25; null when no score has it."
        )
        for name in DIMENSIONS
    },
)


class FleetStatsRowSerializer(serializers.Serializer):
    """One group of the fleet statistics (describes the answer; docs/insights.md explains each figure)."""

    key = serializers.CharField(
        help_text="The group: an alert type, chain id, agent type, judge or criteria hash; for `week` "
        "the Monday of the ISO week, for `day` the date, of the sessions' start (ISO dates, UTC). A judge is "
        "its model and the sampling settings its calls sent, if any: `gemini/gemini-2.5-pro (temperature 0, "
        "seed 0)`; scores made at other settings are another judge's row."
    )
    sessions = serializers.IntegerField(
        help_text="Sessions of the group with a completed score, each counted once."
    )
    mean_score = serializers.FloatField(allow_null=True, help_text="Mean of their newest completed totals.")
    median_score = serializers.FloatField(allow_null=True, help_text="Median (linear interpolation).")
    q1_score = serializers.FloatField(allow_null=True, help_text="First quartile (linear interpolation).")
    q3_score = serializers.FloatField(allow_null=True, help_text="Third quartile (linear interpolation).")
    bands = BANDS
    failed_scorings = serializers.IntegerField(help_text="Failed scoring attempts of the group's sessions.")
    dimension_means = DIMENSION_MEANS
    input_tokens = serializers.IntegerField(allow_null=True, help_text="Judge input tokens of every scoring.")
    output_tokens = serializers.IntegerField(
        allow_null=True, help_text="Judge output tokens of every scoring."
    )
    cost_usd = serializers.FloatField(
        allow_null=True, help_text="Cost of every scoring, where litellm knew it."
    )
    cached_input_tokens = serializers.IntegerField(
        allow_null=True,
        help_text="Of `input_tokens`, those the provider read from its prompt cache "
        "(discounted in `cost_usd`).",
    )


FleetStatsSerializer = inline_serializer(
    "FleetStats",
    {
        "group_by": serializers.ChoiceField(choices=list(GROUPINGS)),
        "filters": serializers.DictField(help_text="The filters applied, as query parameters."),
        "rows": FleetStatsRowSerializer(many=True),
    },
)
STATS_EXAMPLE = {
    "group_by": "week",
    "filters": {"since": "2026-01-01T00:00:00Z", "alert_type": "kubernetes"},
    "rows": [
        {
            "key": "2025-12-29",
            "sessions": 42,
            "mean_score": 63.4,
            "median_score": 66.5,
            "q1_score": 51.25,
            "q3_score": 78.0,
            "bands": {"poor": 8, "weak": 21, "good": 13},
            "failed_scorings": 2,
            "dimension_means": {
                "logical_flow": 16.8,
                "consistency": 17.2,
                "tool_relevance": 13.1,
                "synthesis_quality": 16.3,
            },
            "input_tokens": 1_864_220,
            "output_tokens": 96_410,
            "cost_usd": 5.6261,
            "cached_input_tokens": 901_120,
        }
    ],
}
CSV_COLUMNS = [
    "key",
    "sessions",
    "mean_score",
    "median_score",
    "q1_score",
    "q3_score",
    *(f"band_{band.key}" for band in selectors.SCORE_BANDS),
    "failed_scorings",
    *(f"mean_{name}" for name in DIMENSIONS),
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cached_input_tokens",
]
CSV_EXAMPLE = (
    ",".join(CSV_COLUMNS)
    + "\r\n2025-12-29,42,63.4,66.5,51.25,78.0,8,21,13,2,16.8,17.2,13.1,16.3,1864220,96410,5.6261,901120\r\n"
)


def csv_row(row: dict) -> dict:
    """A row of fleet_stats with its bands and dimension means as columns of their own."""
    flat = {name: value for name, value in row.items() if name not in ("bands", "dimension_means")}
    flat.update({f"band_{band}": count for band, count in row["bands"].items()})
    flat.update({f"mean_{name}": mean for name, mean in row["dimension_means"].items()})
    return flat


class CSVRenderer(renderers.BaseRenderer):
    """Rows (dicts) as CSV with a header row, the columns the view's ``csv_columns`` names.
    Text that a spreadsheet would read as a formula is quoted with a leading apostrophe."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=renderer_context["view"].csv_columns)
        writer.writeheader()
        writer.writerows({name: _cell(value) for name, value in row.items()} for row in data)
        return out.getvalue().encode(self.charset)


def _cell(value):
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class FleetStatsView(APIView):
    """Fleet statistics, one row per group."""

    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, CSVRenderer]
    csv_columns = CSV_COLUMNS

    @extend_schema(
        summary="Fleet statistics by group",
        description=(
            "Over the selected sessions, each counted once by its newest completed score: per group, the "
            "sessions, mean, median and quartiles of the total, sessions per band, the mean of each "
            "criterion, and over every scoring attempt the failed scorings, tokens and cost. Rows are in "
            "key order (weeks and days in time order). `format=csv` (or `Accept: text/csv`) answers the "
            "rows as CSV, bands and criteria as columns of their own. docs/insights.md explains each figure."
        ),
        parameters=[
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=list(GROUPINGS), required=True),
            *FILTER_PARAMETERS,
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"], description="Default json."),
        ],
        responses={
            (200, "application/json"): OpenApiResponse(
                FleetStatsSerializer, examples=[OpenApiExample("By week", value=STATS_EXAMPLE)]
            ),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="The rows as CSV, a header row first; the file is fleet-stats-by-<group_by>.csv.",
                examples=[OpenApiExample("By week, as CSV", value=CSV_EXAMPLE)],
            ),
            400: bad_query(
                "A group_by, filter or format that cannot be read; `detail` names it.",
                "group_by: must be one of " + ", ".join(GROUPINGS) + ", not 'month'",
            ),
            401: NOT_SIGNED_IN,
        },
    )
    def get(self, request):
        group_by = request.query_params.get("group_by", "")
        try:
            filters = parse_filters(request.query_params)
            rows = fleet_stats(filters, group_by)
        except (InvalidFilter, InvalidGrouping) as exc:
            return _refused(exc)
        if request.accepted_renderer.format == CSVRenderer.format:
            return Response(
                [csv_row(row) for row in rows],
                headers={"Content-Disposition": f'attachment; filename="fleet-stats-by-{group_by}.csv"'},
            )
        return Response({"group_by": group_by, "filters": filters.as_params(), "rows": rows})

    def perform_content_negotiation(self, request, force=False):
        try:
            return super().perform_content_negotiation(request, force)
        except Http404:  # DRF's answer to a format no renderer has
            answer_format = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE, "")
            raise ParseError(f"format: must be json or csv, not {answer_format[:50]!r}") from None

    def finalize_response(self, request, response, *args, **kwargs):
        # Errors are JSON, whatever format was asked for.
        if response.status_code >= 400 and isinstance(
            getattr(request, "accepted_renderer", None), CSVRenderer
        ):
            request.accepted_renderer, request.accepted_media_type = (
                renderers.JSONRenderer(),
                "application/json",
            )
        return super().finalize_response(request, response, *args, **kwargs)


# --- Missing-tools backlog -----------------------------------------------------------------------


class MissingToolRowSerializer(serializers.Serializer):
    """One tool of the backlog (describes the answer)."""

    tool = serializers.CharField(help_text="The tool as the judge wrote it most often.")
    key = serializers.CharField(help_text="The name normalised for counting: its spellings are one key.")
    sessions = serializers.IntegerField(help_text="Selected sessions whose newest completed score lacks it.")
    share = serializers.FloatField(help_text="Those sessions' share of the selected sessions (0-1).")
    mean_score = serializers.FloatField(help_text="Mean newest completed total of those sessions.")
    alert_types = serializers.ListField(
        child=serializers.CharField(), help_text="Where it is missing, most sessions first."
    )
    chains = serializers.ListField(
        child=serializers.CharField(), help_text="Chains where it is missing, most sessions first."
    )
    example_session_ids = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="Up to five of those sessions, the most recently started first.",
    )


MissingToolsSerializer = inline_serializer(
    "MissingToolsBacklog",
    {
        "filters": serializers.DictField(help_text="The filters applied, as query parameters."),
        "tools": MissingToolRowSerializer(many=True),
    },
)
BACKLOG_EXAMPLE = {
    "filters": {"alert_type": "kubernetes"},
    "tools": [
        {
            "tool": "kubectl logs",
            "key": "kubectl-logs",
            "sessions": 37,
            "share": 0.4405,
            "mean_score": 54.19,
            "alert_types": ["kubernetes"],
            "chains": ["kubernetes-agent-chain"],
            "example_session_ids": ["7c9e6679-7425-40de-944b-e07fc1f90ae7"],
        }
    ],
}


MAX_LIMIT = 10_000


def parse_limit(raw: str | None) -> int | None:
    """``limit`` as a number (None: every tool); raises InvalidFilter naming it."""
    if raw is None or raw.strip() == "":
        return None
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilter(f"limit: must be a whole number from 1 to {MAX_LIMIT}, not {raw[:50]!r}")
    return limit


class MissingToolsView(APIView):
    """The missing-tools backlog."""

    @extend_schema(
        summary="Missing-tools backlog",
        description=(
            "The tools the judge says the selected sessions lacked (each session by its newest completed "
            "score), the most sessions first: as the judge wrote each, how many sessions lack it and their "
            "share, their mean score, the alert types and chains where it is missing, example sessions. "
            "docs/insights.md explains each figure."
        ),
        parameters=[
            *FILTER_PARAMETERS,
            OpenApiParameter(
                "limit",
                OpenApiTypes.INT,
                description=f"At most this many tools, 1 to {MAX_LIMIT} (default: all).",
            ),
        ],
        responses={
            200: OpenApiResponse(
                MissingToolsSerializer, examples=[OpenApiExample("Backlog", value=BACKLOG_EXAMPLE)]
            ),
            400: bad_query(
                "A filter or limit that cannot be read; `detail` names it.",
                "since: not an ISO 8601 date or date-time: 'yesterday'",
            ),
            401: NOT_SIGNED_IN,
        },
    )
    def get(self, request):
        try:
            filters = parse_filters(request.query_params)
            limit = parse_limit(request.query_params.get("limit"))
        except InvalidFilter as exc:
            return _refused(exc)
        return Response({"filters": filters.as_params(), "tools": missing_tools_backlog(filters, limit)})
