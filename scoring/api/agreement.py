"""``/api/v1/scoring/agreement/``: how far the judge agrees with its human reviewers
(``scoring.insights.agreement``; docs/insights.md explains each figure)."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring.api.errors import DetailErrorSerializer
from scoring.api.insights import FILTER_PARAMETERS
from scoring.insights.agreement import agreement
from scoring.insights.filters import InvalidFilter, parse_filters
from scoring.models import ReviewVerdict


class AgreementGroupSerializer(serializers.Serializer):
    prompt_hash = serializers.CharField(help_text="The criteria hash the judge scored under.")
    judge_model = serializers.CharField(help_text="The judge model (litellm's name).")
    n = serializers.IntegerField(help_text="Pairs: each reviewer's newest review of a reviewed score.")
    reviewed_scores = serializers.IntegerField(help_text="Distinct scores among the pairs.")
    mean_abs_diff = serializers.FloatField(help_text="Mean of |judge's total − reviewer's score|, in points.")
    spearman_rho = serializers.FloatField(
        allow_null=True,
        help_text="Spearman's rank correlation; null below 2 pairs or when a side does not vary.",
    )
    weighted_kappa = serializers.FloatField(
        allow_null=True,
        help_text="Cohen's κ over the three score bands, linear weights; null below 2 pairs or undefined.",
    )
    agree_share = serializers.FloatField(help_text="Share of the pairs whose verdict is agree (0-1).")


class LargestDifferenceSerializer(serializers.Serializer):
    score_id = serializers.UUIDField()
    session_id = serializers.UUIDField()
    prompt_hash = serializers.CharField()
    judge_model = serializers.CharField()
    total_score = serializers.IntegerField(help_text="The judge's score.")
    reviewer_score = serializers.IntegerField()
    difference = serializers.IntegerField(
        help_text="reviewer_score − total_score: above 0, the judge was harsher."
    )
    verdict = serializers.ChoiceField(choices=ReviewVerdict.choices)
    reviewer = serializers.CharField()
    note = serializers.CharField()


class AgreementSerializer(serializers.Serializer):
    groups = AgreementGroupSerializer(many=True)
    largest_differences = LargestDifferenceSerializer(
        many=True, help_text="The pairs where judge and reviewer differ most, largest first (at most 10)."
    )


_BAD_DATE = "since: not an ISO 8601 date or date-time: 'yesterday'"
_EXAMPLE = {
    "groups": [
        {
            "prompt_hash": "9b1f0c2d" + "0" * 56,
            "judge_model": "gemini/gemini-2.5-pro",
            "n": 24,
            "reviewed_scores": 21,
            "mean_abs_diff": 8.42,
            "spearman_rho": 0.781,
            "weighted_kappa": 0.612,
            "agree_share": 0.75,
        }
    ],
    "largest_differences": [
        {
            "score_id": "3f2b8c1e-6a4d-4e0f-9b7a-2c5d8e1f4a6b",
            "session_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "prompt_hash": "9b1f0c2d" + "0" * 56,
            "judge_model": "gemini/gemini-2.5-pro",
            "total_score": 82,
            "reviewer_score": 40,
            "difference": -42,
            "verdict": "disagree",
            "reviewer": "alice",
            "note": "Concluded without reading the pod logs.",
        }
    ],
}


class AgreementView(APIView):
    """Judge-human agreement per criteria hash and judge model."""

    @extend_schema(
        summary="Judge-human agreement",
        description=(
            "Over every reviewed completed score of the selected sessions (each reviewer's newest review "
            "of a score is one pair), per criteria hash and judge model: pairs, mean absolute "
            "difference, Spearman's ρ, linearly weighted Cohen's κ over the score bands, share of "
            "agree verdicts; and the pairs that differ most. docs/insights.md explains the figures."
        ),
        parameters=FILTER_PARAMETERS,
        responses={
            200: OpenApiResponse(
                AgreementSerializer, examples=[OpenApiExample("One judge model", value=_EXAMPLE)]
            ),
            400: OpenApiResponse(
                DetailErrorSerializer,
                description="A filter that cannot be read; `detail` names it.",
                examples=[OpenApiExample("Bad date", value={"detail": _BAD_DATE})],
            ),
            401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
        },
    )
    def get(self, request):
        try:
            filters = parse_filters(request.query_params)
        except InvalidFilter as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(agreement(filters))
