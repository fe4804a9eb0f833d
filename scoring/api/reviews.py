"""``/api/v1/scoring/scores/{score_id}/reviews``: people's reviews of a judge's score.

The write is ``services.record_review``, the admin's too: the same rules either way.
"""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from scoring import selectors, services
from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.api.permissions import ReviewWriteAllowed
from scoring.models import REVIEW_NOTE_MAX_CHARS, ReviewVerdict, ScoreReview, SessionScore


class ReviewRequestSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(
        choices=ReviewVerdict.choices, help_text="Whether the reviewer agrees with the judge's score."
    )
    reviewer_score = serializers.IntegerField(
        min_value=0, max_value=100, help_text="The score (0-100) the reviewer would give."
    )
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=REVIEW_NOTE_MAX_CHARS,
        help_text=f"Why: what the judge missed or got right (at most {REVIEW_NOTE_MAX_CHARS:,} characters).",
    )


class ReviewSerializer(serializers.ModelSerializer):
    review_id = serializers.IntegerField(source="id", read_only=True)
    score_id = serializers.UUIDField(read_only=True)
    reviewer = serializers.CharField(
        source="reviewer.get_username", read_only=True, help_text="The reviewer's user name."
    )

    class Meta:
        model = ScoreReview
        fields = ["review_id", "score_id", "reviewer", "verdict", "reviewer_score", "note", "created_at"]
        read_only_fields = fields


_REVIEW = ReviewSerializer()
_REVIEW_EXAMPLE = {
    "review_id": 42,
    "score_id": "3f2b8c1e-6a4d-4e0f-9b7a-2c5d8e1f4a6b",
    "reviewer": "alice",
    "verdict": "disagree",
    "reviewer_score": 45,
    "note": "The judge missed that the pod logs were never read.",
    "created_at": "2026-03-04T05:06:07.123456Z",
}
_ERRORS = {
    401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
    404: OpenApiResponse(DetailErrorSerializer, description="No score with this id."),
}


def _score_key(raw: str):
    try:
        return selectors.score_key(raw)
    except SessionScore.DoesNotExist as exc:
        raise NotFound(str(exc)) from None


class ScoreReviewsView(generics.ListAPIView):
    """Read and record people's reviews of one judge score."""

    permission_classes = [IsAuthenticated, ReviewWriteAllowed]
    # Used only to describe the list (and its pages) in the schema; reads go through selectors.
    queryset = ScoreReview.objects.none()
    serializer_class = ReviewSerializer

    @extend_schema(
        summary="List the score's reviews",
        description="Every review of the score, newest first, 50 a page (anyone signed in may read them); "
        "an empty list when nobody has reviewed the score.",
        examples=[OpenApiExample("One review", value=_REVIEW_EXAMPLE, response_only=True)],
        responses={200: ReviewSerializer(many=True), **_ERRORS},
    )
    def get(self, request, score_id: str):
        key = _score_key(score_id)
        reviews = selectors.score_reviews(key)
        if reviews is None:
            raise NotFound(selectors.no_such_score(key))
        page = self.paginate_queryset(reviews)
        return self.get_paginated_response([_REVIEW.to_representation(review) for review in page])

    @extend_schema(
        summary="Review the score",
        description=(
            "Records the signed-in user's verdict on a completed score and the score they would give. "
            "The judge's output is never changed; every review is kept (a second review by the same "
            "person adds a row, and the agreement figures count their newest). Needs the "
            f"`{services.REVIEW_PERMISSION}` permission (\"add score review\"), as in the admin."
        ),
        request=ReviewRequestSerializer,
        responses={
            201: OpenApiResponse(
                ReviewSerializer,
                description="The review, as recorded.",
                examples=[OpenApiExample("Recorded", value=_REVIEW_EXAMPLE)],
            ),
            400: field_errors(
                "The score is not completed (a `detail` saying so), or a bad body (messages by field too).",
                {"reviewer_score": ["Ensure this value is less than or equal to 100."]},
            ),
            403: OpenApiResponse(DetailErrorSerializer, description="No permission to review scores."),
            **_ERRORS,
        },
        examples=[
            OpenApiExample(
                "Disagree",
                value={"verdict": "disagree", "reviewer_score": 45, "note": "The pod logs were never read."},
                request_only=True,
            ),
            OpenApiExample("Agree", value={"verdict": "agree", "reviewer_score": 80}, request_only=True),
        ],
    )
    def post(self, request, score_id: str):
        key = _score_key(score_id)
        body = ReviewRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            review = services.record_review(score_id=key, reviewer=request.user, **body.validated_data)
        except services.ScoreNotFound as exc:
            raise NotFound(str(exc)) from None
        except services.ReviewRejected as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(_REVIEW.to_representation(review), status=status.HTTP_201_CREATED)
