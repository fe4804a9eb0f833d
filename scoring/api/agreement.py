"""``/api/v1/scoring/agreement/``: how far the judge agrees with its human reviewers
(``scoring.insights.agreement``), and with Go TARSy's reviewers and Go TARSy's own judge
(``scoring.insights.tarsy_agreement``); docs/insights.md explains each figure."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring.api.errors import DetailErrorSerializer
from scoring.api.insights import FILTER_PARAMETERS
from scoring.insights.agreement import agreement
from scoring.insights.confidence import RESAMPLES, minimum_sessions
from scoring.insights.filters import InvalidFilter, parse_filters
from scoring.insights.tarsy_agreement import tarsy_agreement
from scoring.models import QualityRating, ReviewVerdict
from scoring.selectors import SCORE_BANDS

_BANDS = [band.key for band in SCORE_BANDS]
_TOO_FEW = (
    "The names of the group's figures withheld (null) for resting on fewer sessions than minimum_n: "
    "the insights page says \"too few\" in their place."
)


def _judge_sampling_fields(whose: str) -> dict:
    """The judge's sampling settings, beside its model: with it, the judge's identity."""
    return {
        "judge_temperature": serializers.FloatField(
            allow_null=True, help_text=f"The temperature {whose} judge calls sent; null: none (the provider's default)."
        ),
        "judge_seed": serializers.IntegerField(
            allow_null=True, help_text=f"The seed {whose} judge calls sent; null: none."
        ),
    }


def _too_few(*figures: str) -> dict:
    """The fields that say a group's figures are withheld, and why."""
    return {
        "too_few": serializers.ListField(child=serializers.ChoiceField(choices=figures), help_text=_TOO_FEW),
        "too_few_reviews": serializers.BooleanField(
            help_text="Whether a figure of the group is withheld (null) for resting on fewer sessions than "
            "minimum_n."
        ),
        "reason": serializers.CharField(
            allow_null=True,
            help_text="Why, when too_few_reviews: how many sessions there are and how many a figure needs; "
            "else null.",
        ),
    }


def _ci(figure: str) -> serializers.ListField:
    """A figure's 95 % confidence interval."""
    return serializers.ListField(
        child=serializers.FloatField(),
        min_length=2,
        max_length=2,
        allow_null=True,
        help_text=(
            f"The 95 % bootstrap confidence interval of {figure}, [low, high] (percentile method, "
            f"{RESAMPLES} resamples of the sessions, fixed seed); null when {figure} is null or undefined "
            "in more than half the resamples."
        ),
    )


class AgreementGroupSerializer(serializers.Serializer):
    prompt_hash = serializers.CharField(help_text="The criteria hash the judge scored under.")
    judge_model = serializers.CharField(help_text="The judge model (litellm's name).")
    judge_temperature, judge_seed = _judge_sampling_fields("the").values()
    n = serializers.IntegerField(help_text="Pairs: each reviewer's newest review of a reviewed score.")
    reviewed_scores = serializers.IntegerField(help_text="Distinct scores among the pairs.")
    reviewed_sessions = serializers.IntegerField(
        help_text="Distinct sessions among the pairs: what minimum_n counts and the bootstrap resamples."
    )
    mean_abs_diff = serializers.FloatField(
        allow_null=True,
        help_text="Mean of |judge's total − reviewer's score|, in points; null below minimum_n (too_few).",
    )
    mean_abs_diff_ci = _ci("mean_abs_diff")
    spearman_rho = serializers.FloatField(
        allow_null=True,
        help_text="Spearman's rank correlation; null below minimum_n (too_few), or when a side does not "
        "vary.",
    )
    spearman_rho_ci = _ci("spearman_rho")
    weighted_kappa = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Cohen's κ over the three score bands, linear weights; null below minimum_n (too_few), or "
            "undefined."
        ),
    )
    weighted_kappa_ci = _ci("weighted_kappa")
    agree_share = serializers.FloatField(
        allow_null=True,
        help_text="Share of the pairs whose verdict is agree (0-1); null below minimum_n (too_few).",
    )
    agree_share_ci = _ci("agree_share")
    too_few, too_few_reviews, reason = _too_few(
        "mean_abs_diff", "spearman_rho", "weighted_kappa", "agree_share"
    ).values()


class LargestDifferenceSerializer(serializers.Serializer):
    score_id = serializers.UUIDField()
    session_id = serializers.UUIDField()
    prompt_hash = serializers.CharField()
    judge_model = serializers.CharField()
    judge_temperature, judge_seed = _judge_sampling_fields("the score's").values()
    total_score = serializers.IntegerField(help_text="The judge's score.")
    reviewer_score = serializers.IntegerField()
    difference = serializers.IntegerField(
        help_text="reviewer_score − total_score: above 0, the judge was harsher."
    )
    verdict = serializers.ChoiceField(choices=ReviewVerdict.choices)
    reviewer = serializers.CharField()
    note = serializers.CharField()


class TarsyRatingCountsSerializer(serializers.Serializer):
    accurate = serializers.IntegerField()
    partially_accurate = serializers.IntegerField()
    inaccurate = serializers.IntegerField()


class TarsyConfusionRowSerializer(serializers.Serializer):
    band = serializers.ChoiceField(choices=_BANDS, help_text="Our score's band.")
    inaccurate = serializers.IntegerField(help_text="Sessions of the band rated inaccurate.")
    partially_accurate = serializers.IntegerField(help_text="Sessions of the band rated partially accurate.")
    accurate = serializers.IntegerField(help_text="Sessions of the band rated accurate.")


class BandRatingMappingSerializer(serializers.Serializer):
    band = serializers.ChoiceField(choices=_BANDS)
    rating = serializers.ChoiceField(choices=QualityRating.choices)


class TarsyReviewersAgreementGroupSerializer(serializers.Serializer):
    prompt_hash = serializers.CharField(help_text="Our criteria hash (of our newest completed score).")
    judge_model = serializers.CharField(help_text="Our judge model.")
    judge_temperature, judge_seed = _judge_sampling_fields("our").values()
    n = serializers.IntegerField(help_text="Sessions with our score and a TARSy reviewers' rating.")
    ratings = TarsyRatingCountsSerializer(help_text="Those sessions per rating.")
    spearman_rho = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Spearman's ρ between our total and the rating as an order (inaccurate 0 < partially_accurate 1 "
            "< accurate 2); null below minimum_n (too_few) or when a side does not vary."
        ),
    )
    spearman_rho_ci = _ci("spearman_rho")
    auc_n = serializers.IntegerField(help_text="Sessions rated accurate or inaccurate: what auc reads.")
    auc = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Share of (accurate, inaccurate) pairs of sessions where the accurate one has our higher "
            "total, a tie counting half (0.5: no better than chance); null when auc_n is below "
            "minimum_n (too_few) or one of the two ratings is missing."
        ),
    )
    auc_ci = _ci("auc")
    confusion = TarsyConfusionRowSerializer(
        many=True, help_text="Sessions per our band (poor, weak, good), by their rating."
    )
    mapping_agree_share = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Share of the sessions whose band stands for their rating (mapping), 0-1; null below minimum_n."
        ),
    )
    mapping_agree_share_ci = _ci("mapping_agree_share")
    too_few, too_few_reviews, reason = _too_few("spearman_rho", "auc", "mapping_agree_share").values()


class TarsyReviewersAgreementSerializer(serializers.Serializer):
    minimum_n = serializers.IntegerField(help_text="Sessions a figure needs; below it, the figure is null.")
    mapping = BandRatingMappingSerializer(
        many=True,
        help_text="The rating each of our bands stands for: poor inaccurate, weak partially, good accurate.",
    )
    unknown_ratings = serializers.DictField(
        child=serializers.IntegerField(),
        help_text=(
            "Sessions left out for a rating this service does not know (a new one of Go TARSy's), by rating."
        ),
    )
    groups = TarsyReviewersAgreementGroupSerializer(many=True)


class TarsyJudgeAgreementGroupSerializer(serializers.Serializer):
    prompt_hash = serializers.CharField(help_text="Our criteria hash (of our newest completed score).")
    judge_model = serializers.CharField(help_text="Our judge model.")
    judge_temperature, judge_seed = _judge_sampling_fields("our").values()
    tarsy_prompt_hash = serializers.CharField(help_text="TARSy's judge's prompt hash.")
    tarsy_judge_model = serializers.CharField(help_text="TARSy's judge model (empty: TARSy does not say).")
    n = serializers.IntegerField(help_text="Sessions scored by both judges.")
    spearman_rho = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Spearman's ρ of the two totals; null below minimum_n (too_few) or when a side does not vary."
        ),
    )
    spearman_rho_ci = _ci("spearman_rho")
    mean_abs_diff = serializers.FloatField(
        allow_null=True, help_text="Mean of |our total − TARSy's|, in points; null below minimum_n."
    )
    mean_abs_diff_ci = _ci("mean_abs_diff")
    mean_difference = serializers.FloatField(
        allow_null=True,
        help_text="Mean of our total − TARSy's: above 0, our judge is kinder; null below minimum_n.",
    )
    mean_difference_ci = _ci("mean_difference")
    too_few, too_few_reviews, reason = _too_few("spearman_rho", "mean_abs_diff", "mean_difference").values()


class TarsyJudgeAgreementSerializer(serializers.Serializer):
    minimum_n = serializers.IntegerField(help_text="Sessions a figure needs; below it, the figure is null.")
    groups = TarsyJudgeAgreementGroupSerializer(many=True)


class AgreementSerializer(serializers.Serializer):
    minimum_n = serializers.IntegerField(
        help_text="Reviewed sessions a group's figures need; below it, they are null (too_few_reviews)."
    )
    groups = AgreementGroupSerializer(many=True)
    largest_differences = LargestDifferenceSerializer(
        many=True, help_text="The pairs where judge and reviewer differ most, largest first (at most 10)."
    )
    tarsy_reviewers = TarsyReviewersAgreementSerializer(
        help_text="Our judge against Go TARSy's reviewers' verdict (quality_rating) on the same sessions."
    )
    tarsy_judge = TarsyJudgeAgreementSerializer(
        help_text="Our judge against Go TARSy's own judge (another judge: never counted as ours)."
    )


_BAD_DATE = "since: not an ISO 8601 date or date-time: 'yesterday'"
_EXAMPLE = {
    "minimum_n": minimum_sessions(),
    "groups": [
        {
            "prompt_hash": "9b1f0c2d" + "0" * 56,
            "judge_model": "gemini/gemini-2.5-pro",
            "judge_temperature": 0.0,
            "judge_seed": 0,
            "n": 24,
            "reviewed_scores": 21,
            "reviewed_sessions": 20,
            "mean_abs_diff": 8.42,
            "mean_abs_diff_ci": [5.9, 11.35],
            "spearman_rho": 0.781,
            "spearman_rho_ci": [0.552, 0.903],
            "weighted_kappa": 0.612,
            "weighted_kappa_ci": [0.341, 0.835],
            "agree_share": 0.75,
            "agree_share_ci": [0.565, 0.917],
            "too_few": [],
            "too_few_reviews": False,
            "reason": None,
        }
    ],
    "largest_differences": [
        {
            "score_id": "3f2b8c1e-6a4d-4e0f-9b7a-2c5d8e1f4a6b",
            "session_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "prompt_hash": "9b1f0c2d" + "0" * 56,
            "judge_model": "gemini/gemini-2.5-pro",
            "judge_temperature": 0.0,
            "judge_seed": 0,
            "total_score": 82,
            "reviewer_score": 40,
            "difference": -42,
            "verdict": "disagree",
            "reviewer": "alice",
            "note": "Concluded without reading the pod logs.",
        }
    ],
    "tarsy_reviewers": {
        "minimum_n": minimum_sessions(),
        "mapping": [
            {"band": "poor", "rating": "inaccurate"},
            {"band": "weak", "rating": "partially_accurate"},
            {"band": "good", "rating": "accurate"},
        ],
        "unknown_ratings": {},
        "groups": [
            {
                "prompt_hash": "9b1f0c2d" + "0" * 56,
                "judge_model": "gemini/gemini-2.5-pro",
                "judge_temperature": 0.0,
                "judge_seed": 0,
                "n": 12,
                "ratings": {"accurate": 6, "partially_accurate": 3, "inaccurate": 3},
                "spearman_rho": 0.774,
                "spearman_rho_ci": [0.392, 0.954],
                "auc_n": 9,
                "auc": 0.944,
                "auc_ci": [0.75, 1.0],
                "confusion": [
                    {"band": "poor", "inaccurate": 2, "partially_accurate": 1, "accurate": 0},
                    {"band": "weak", "inaccurate": 1, "partially_accurate": 1, "accurate": 1},
                    {"band": "good", "inaccurate": 0, "partially_accurate": 1, "accurate": 5},
                ],
                "mapping_agree_share": 0.667,
                "mapping_agree_share_ci": [0.417, 0.917],
                "too_few": [],
                "too_few_reviews": False,
                "reason": None,
            }
        ],
    },
    "tarsy_judge": {
        "minimum_n": minimum_sessions(),
        "groups": [
            {
                "prompt_hash": "9b1f0c2d" + "0" * 56,
                "judge_model": "gemini/gemini-2.5-pro",
                "judge_temperature": 0.0,
                "judge_seed": 0,
                "tarsy_prompt_hash": "4e07a1b3" + "0" * 56,
                "tarsy_judge_model": "gemini-2.5-flash",
                "n": 3,
                "spearman_rho": None,
                "spearman_rho_ci": None,
                "mean_abs_diff": None,
                "mean_abs_diff_ci": None,
                "mean_difference": None,
                "mean_difference_ci": None,
                "too_few": ["spearman_rho", "mean_abs_diff", "mean_difference"],
                "too_few_reviews": True,
                "reason": f"too few sessions: 3 sessions, a figure needs at least {minimum_sessions()}",
            }
        ],
    },
}


class AgreementView(APIView):
    """Judge-human agreement per criteria hash and judge model; our judge against Go TARSy's
    reviewers and Go TARSy's judge."""

    @extend_schema(
        summary="Judge-human agreement",
        description=(
            "Over every reviewed completed score of the selected sessions (each reviewer's newest review "
            "of a score is one pair), per criteria hash and judge model: pairs, mean absolute "
            "difference, Spearman's ρ, linearly weighted Cohen's κ over the score bands, share of "
            "agree verdicts, each with its 95 % bootstrap confidence interval (`<figure>_ci`); and the "
            "pairs that differ most. Then, over the selected sessions' newest "
            "completed scores: `tarsy_reviewers`, our judge against Go TARSy's reviewers' rating of the "
            "same session (Spearman's ρ, AUC of accurate against inaccurate, a confusion table of our "
            "bands by rating and the share agreeing under the documented mapping), and `tarsy_judge`, "
            "our judge against Go TARSy's own judge (ρ, mean absolute difference, mean difference): "
            "another judge, never counted as ours, each figure with its interval too. Below `minimum_n` "
            "(reviewed) sessions a group's figures are null, named in `too_few`, with `too_few_reviews` "
            "true and the `reason`. docs/insights.md explains the figures."
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
        return Response({**agreement(filters), **tarsy_agreement(filters)})
