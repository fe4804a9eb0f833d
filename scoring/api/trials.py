"""``/api/v1/scoring/trials/``: trials of candidate criteria against the reviewers
(docs/insights.md, "Trials").

Anyone signed in reads a trial and its figures; staff, or a user with the ``change_criteria``
permission, plans, starts and cancels one; a trial scoring's transcript is for staff, as a
score's is. Every write is a ``scoring.trials.services`` function, the admin's too.
"""

import uuid

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring import failures
from scoring.api.criteria import CriteriaWriteAllowed
from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.api.permissions import StaffOnly
from scoring.api.transcripts import TranscriptConversationSerializer
from scoring.models import Trial, TrialScoring
from scoring.trials import selectors, services


class TrialCreateSerializer(serializers.Serializer):
    candidate_version_id = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The criteria version to try (a candidate); null: the current criteria judge both arms.",
    )
    candidate_model = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=255,
        help_text="The judge model to try (litellm's name), reached through the configured API base and key; "
        "empty: the configured model judges both arms. One of the two at least.",
    )
    size = serializers.IntegerField(
        required=False,
        default=services.DEFAULT_TRIAL_SIZE,
        min_value=1,
        max_value=services.MAX_TRIAL_SIZE,
        help_text=f"Sessions to draw (default {services.DEFAULT_TRIAL_SIZE}), each judged under both arms.",
    )
    alert_type = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Draw only sessions of this alert type."
    )
    chain_id = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Draw only sessions of this chain."
    )
    seed = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        help_text="The seed of the draw (default: random): the same sessions and seed draw the same sample.",
    )
    session_ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        allow_null=True,
        default=None,
        max_length=services.MAX_TRIAL_SIZE,
        help_text="A dry run's session_ids, to start the trial on the very sample it showed (each must still "
        "be in the pool); instead of drawing one.",
    )
    description = serializers.CharField(required=False, allow_blank=True, default="")
    dry_run = serializers.BooleanField(
        default=False,
        help_text="Draw the sample and estimate its tokens and cost, and start nothing (200, not 201).",
    )


class SpendEstimateSerializer(serializers.Serializer):
    scorings = serializers.IntegerField(help_text="Scorings that would be sent (less those that would fail).")
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.CharField(
        allow_null=True,
        help_text="litellm's price of the priced scorings, summed (no cache discount); null: none priced.",
    )
    unpriced_scorings = serializers.IntegerField()


class ArmEstimateSerializer(SpendEstimateSerializer):
    judge_model = serializers.CharField(help_text="The model the arm's judge calls go to.")
    window_tokens = serializers.IntegerField(help_text="Its context window, as a scoring fits prompts to it.")


class EstimateSerializer(SpendEstimateSerializer):
    arms = serializers.DictField(
        child=ArmEstimateSerializer(), help_text="The same by arm: candidate, current."
    )
    would_fail = serializers.ListField(
        child=serializers.DictField(),
        help_text="Scorings that would fail before any call: session_id, arm, reason.",
    )


class DryRunSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    candidate_version_id = serializers.IntegerField(allow_null=True)
    candidate_model = serializers.CharField()
    seed = serializers.IntegerField(help_text="Pass it back to start the trial on this very sample.")
    session_ids = serializers.ListField(child=serializers.UUIDField())
    estimate = EstimateSerializer()


class TrialSerializer(serializers.ModelSerializer):
    candidate_version_id = serializers.IntegerField(source="candidate_id", read_only=True, allow_null=True)
    progress = serializers.SerializerMethodField(
        help_text="How many of its scorings are pending, in progress, completed and failed, and in all."
    )
    estimate = EstimateSerializer(read_only=True, help_text="The dry run's estimate when it was started.")

    class Meta:
        model = Trial
        fields = [
            "trial_id", "candidate_version_id", "candidate_hash", "candidate_model", "status", "size",
            "alert_type", "chain_id", "seed", "judge_model", "description", "created_by", "created_at_us",
            "ended_at_us", "progress", "estimate",
        ]  # fmt: skip
        read_only_fields = fields

    def get_progress(self, trial: Trial) -> dict[str, int]:
        return selectors.progress(trial)


class TrialScoringSerializer(serializers.ModelSerializer):
    scoring_id = serializers.IntegerField(source="id", read_only=True)
    error_message = serializers.SerializerMethodField(
        help_text="Why it failed: the recorded error for staff, a reason for others (as a score's)."
    )

    class Meta:
        model = TrialScoring
        fields = [
            "scoring_id", "session_id", "arm", "prompt_hash", "model", "status", "total_score",
            "analysis_missing", "score_spread", "input_coverage", "input_tokens", "output_tokens", "cost_usd",
            "judge_model", "waiting_reason", "error_message", "started_at_us", "completed_at_us",
        ]  # fmt: skip
        read_only_fields = fields

    def get_error_message(self, scoring: TrialScoring) -> str | None:
        request = self.context.get("request")
        return failures.for_caller(scoring.error_message, request.user if request else None)


class TrialDetailSerializer(TrialSerializer):
    results = serializers.SerializerMethodField(
        help_text=(
            'The figures (docs/insights.md, "Trials"): paired_sessions; n (the sessions each figure rests '
            "on), too_few (those withheld below minimum_n), too_few_reviews and reason (by figure); for "
            "each arm (candidate, current) mean_abs_diff, spearman_rho, weighted_kappa, each with its 95 % "
            "bootstrap interval (<figure>_ci), the confusion table by band, cost per scoring and mean "
            "spread; differences (candidate − current of each figure, and the mean shift of the totals: "
            "difference, ci, significant); and largest_differences."
        )
    )

    class Meta(TrialSerializer.Meta):
        fields = [*TrialSerializer.Meta.fields, "results"]
        read_only_fields = fields

    def get_results(self, trial: Trial) -> dict:
        return selectors.results(trial)


class TrialScoringTranscriptSerializer(TrialScoringSerializer):
    score_analysis = serializers.CharField(read_only=True, allow_null=True)
    missing_tools_analysis = serializers.CharField(read_only=True, allow_null=True)
    transcript = serializers.SerializerMethodField(
        help_text="What the judge was sent and wrote, as a score's transcript holds it; null before it ran."
    )

    class Meta(TrialScoringSerializer.Meta):
        fields = [
            *TrialScoringSerializer.Meta.fields,
            "score_analysis",
            "missing_tools_analysis",
            "transcript",
        ]
        read_only_fields = fields

    def get_transcript(self, scoring: TrialScoring) -> dict | None:
        if scoring.transcript is None:
            return None
        conversations = TranscriptConversationSerializer(scoring.transcript["conversations"], many=True).data
        return {**scoring.transcript, "conversations": conversations}


_TRIAL_EXAMPLE = {
    "trial_id": "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f",
    "candidate_version_id": 3,
    "candidate_hash": "5d41402abc4b2a76b9719d911017c592" * 2,
    "candidate_model": "",
    "status": "running",
    "size": 30,
    "alert_type": "",
    "chain_id": "",
    "seed": 1234,
    "judge_model": "openai/gpt-4o-mini",
    "description": "Stricter about reading pod logs.",
    "created_by": "carol",
    "created_at_us": 1764400000000000,
    "ended_at_us": None,
    "progress": {"pending": 40, "in_progress": 4, "completed": 16, "failed": 0, "total": 60},
    "estimate": {
        "scorings": 60,
        "input_tokens": 1250000,
        "output_tokens": 96000,
        "cost_usd": "0.2451",
        "unpriced_scorings": 0,
        "arms": {
            arm: {
                "judge_model": "openai/gpt-4o-mini",
                "window_tokens": 128000,
                "scorings": 30,
                "input_tokens": 625000,
                "output_tokens": 48000,
                "cost_usd": cost,
                "unpriced_scorings": 0,
            }
            for arm, cost in (("candidate", "0.1300"), ("current", "0.1151"))
        },
        "would_fail": [],
    },
}
_ERRORS = {
    401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
    403: OpenApiResponse(
        DetailErrorSerializer, description="Writing needs staff or the change_criteria permission."
    ),
}
_NOT_FOUND = {404: OpenApiResponse(DetailErrorSerializer, description="No trial with this id.")}
_REFUSED = {
    409: OpenApiResponse(
        DetailErrorSerializer,
        description="Refused, saying why: no candidate, a version that is not a candidate, a model litellm "
        "cannot place, no reviewed session of its scope, a candidate that is what judges now, or a trial "
        "that is not running.",
    )
}
_INVALID = field_errors(
    "A bad value (a `detail` saying what is wrong).",
    {"size": ["Ensure this value is less than or equal to 500."]},
)


def _trial(trial_id: str) -> Trial:
    try:
        key = uuid.UUID(trial_id)
    except ValueError:
        raise NotFound(f"trial {trial_id} not found") from None
    trial = selectors.get_trial(key)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def _refused(exc: services.TrialRejected) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


class TrialListView(generics.ListAPIView):
    """List the trials, or plan or start one."""

    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]
    queryset = Trial.objects.none()  # for the schema; reads go through selectors
    serializer_class = TrialSerializer

    @extend_schema(
        summary="List the trials",
        description="Every trial, newest first, 50 a page, with its progress (GET one for its figures).",
        examples=[OpenApiExample("A running trial", value=_TRIAL_EXAMPLE, response_only=True)],
        responses={200: TrialSerializer(many=True), 401: _ERRORS[401]},
    )
    def get(self, request):
        page = self.paginate_queryset(selectors.trials())
        return self.get_paginated_response(TrialSerializer(page, many=True).data)

    @extend_schema(
        summary="Plan or start a trial",
        description=(
            "Draw a stratified sample of reviewed sessions of the candidate's scope (by the reviewers' band "
            "and the alert type) and judge each by the candidate (criteria, judge model, or both) and by "
            "the criteria current for it and the configured model, in scorings of the trial's own: no "
            "score of the service changes. With `dry_run`, only the sample and its estimate of tokens and "
            "cost (200); pass its `seed` back to start that sample. "
            "Needs staff or the `change_criteria` permission."
        ),
        request=TrialCreateSerializer,
        responses={
            200: OpenApiResponse(DryRunSerializer, description="The dry run: nothing started."),
            201: OpenApiResponse(TrialSerializer, examples=[OpenApiExample("Started", _TRIAL_EXAMPLE)]),
            400: _INVALID,
            **_ERRORS,
            **_REFUSED,
        },
    )
    def post(self, request):
        body = TrialCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            plan = services.plan_trial(
                candidate_id=data["candidate_version_id"],
                candidate_model=data["candidate_model"],
                size=data["size"],
                alert_type=data["alert_type"],
                chain_id=data["chain_id"],
                seed=data["seed"],
                session_ids=data["session_ids"],
            )
        except services.TrialRejected as exc:
            return _refused(exc)
        if data["dry_run"]:
            answer = {
                "dry_run": True,
                "candidate_version_id": plan.candidate.pk if plan.candidate is not None else None,
                "candidate_model": plan.candidate_model,
                "seed": plan.seed,
                "session_ids": plan.session_ids,
                "estimate": plan.estimate,
            }
            return Response(DryRunSerializer(answer).data)
        trial = services.start_trial(
            plan, created_by=request.user.get_username(), description=data["description"]
        )
        return Response(TrialSerializer(trial).data, status=status.HTTP_201_CREATED)


class TrialDetailView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        summary="Get a trial with its figures",
        description="The trial, its progress and its figures so far (over the sessions both arms completed); "
        "its scorings are listed at `scorings`.",
        responses={200: TrialDetailSerializer, 401: _ERRORS[401], **_NOT_FOUND},
    )
    def get(self, request, trial_id: str):
        return Response(TrialDetailSerializer(_trial(trial_id)).data)


class TrialCancelView(APIView):
    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]

    @extend_schema(
        summary="Cancel a running trial",
        description="Its pending scorings fail unasked; those in progress finish. Needs staff or the "
        "`change_criteria` permission.",
        request=None,
        responses={200: TrialSerializer, **_ERRORS, **_NOT_FOUND, **_REFUSED},
    )
    def post(self, request, trial_id: str):
        trial = _trial(trial_id)
        try:
            trial = services.cancel_trial(trial.pk, cancelled_by=request.user.get_username())
        except services.TrialRejected as exc:
            return _refused(exc)
        return Response(TrialSerializer(trial).data)


class TrialScoringView(APIView):
    permission_classes = [IsAuthenticated, StaffOnly]

    @extend_schema(
        summary="Get a trial scoring with its transcript",
        description="One session under one arm: the judge's analysis, its missing tools and its transcript. "
        "Staff only, as a score's transcript is.",
        responses={
            200: TrialScoringTranscriptSerializer,
            401: _ERRORS[401],
            403: OpenApiResponse(DetailErrorSerializer, description="Staff only."),
            404: OpenApiResponse(
                DetailErrorSerializer, description="No such trial, or no such scoring of it."
            ),
        },
    )
    def get(self, request, trial_id: str, scoring_id: int):
        scoring = _trial(trial_id).scorings.filter(pk=scoring_id).first()
        if scoring is None:
            raise NotFound(f"trial {trial_id} has no scoring {scoring_id}")
        return Response(TrialScoringTranscriptSerializer(scoring, context={"request": request}).data)


class TrialScoringListView(generics.ListAPIView):
    permission_classes = [IsAuthenticated]
    queryset = TrialScoring.objects.none()  # for the schema; reads go through selectors
    serializer_class = TrialScoringSerializer

    @extend_schema(
        summary="List a trial's scorings",
        description="Each session under each arm, with its outcome, by session then arm, 50 a page.",
        responses={200: TrialScoringSerializer(many=True), 401: _ERRORS[401], **_NOT_FOUND},
    )
    def get(self, request, trial_id: str):
        page = self.paginate_queryset(selectors.scorings(_trial(trial_id)))
        return self.get_paginated_response(
            TrialScoringSerializer(page, many=True, context={"request": request}).data
        )
