"""``/api/v1/scoring/criteria/``: the judge's criteria versions (docs/criteria.md).

Anyone signed in reads them; staff, or a user with the ``change_criteria`` permission, writes
them. Every write is a ``scoring.criteria.services`` function, the command's and the admin's too.
"""

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring.api.errors import DetailErrorSerializer, field_errors
from scoring.criteria import corrections, selectors, services
from scoring.judge.prompts import Criteria
from scoring.models import CriteriaChange, CriteriaScope, CriteriaState, CriteriaVersion


class CriteriaWriteAllowed(BasePermission):
    """Reading criteria is for anyone signed in; changing them is for staff or the
    ``change_criteria`` permission (``services.can_change_criteria``)."""

    message = f"Changing judge criteria needs staff status or the {services.CRITERIA_PERMISSION} permission."

    def has_permission(self, request, view) -> bool:
        return request.method in SAFE_METHODS or services.can_change_criteria(request.user)


class CriteriaVersionSerializer(serializers.ModelSerializer):
    version_id = serializers.IntegerField(source="id", read_only=True)

    class Meta:
        model = CriteriaVersion
        fields = [
            "version_id", "state", "scope", "scope_value", "prompt_hash", "description", "created_by",
            "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields
        extra_kwargs = {
            "prompt_hash": {"help_text": "SHA256 of the texts: what every score made under them carries."},
            "state": {
                "help_text": "draft (texts may change), candidate, current (judges its scope), retired."
            },
            "scope": {
                "help_text": "Which sessions it judges when current: all (global), one alert type, one chain."
            },
        }


class CriteriaChangeSerializer(serializers.ModelSerializer):
    version_id = serializers.IntegerField(read_only=True)
    replaced_version_id = serializers.IntegerField(
        source="replaced_id",
        read_only=True,
        allow_null=True,
        help_text="A promotion: the version it retired.",
    )
    restored_version_id = serializers.IntegerField(
        source="restored_id",
        read_only=True,
        allow_null=True,
        help_text="A rollback: the version made current again (null: the scope fell back to a wider one).",
    )

    class Meta:
        model = CriteriaChange
        fields = [
            "version_id",
            "action",
            "replaced_version_id",
            "restored_version_id",
            "changed_by",
            "changed_at",
            "reason",
        ]
        read_only_fields = fields


class CriteriaVersionDetailSerializer(CriteriaVersionSerializer):
    changes = serializers.SerializerMethodField(help_text="Every recorded change involving it, newest first.")

    class Meta(CriteriaVersionSerializer.Meta):
        fields = [
            *CriteriaVersionSerializer.Meta.fields,
            "system_prompt",
            "score_prompt",
            "followup_prompt",
            "examples",
            "changes",
        ]
        read_only_fields = fields
        extra_kwargs = {
            **CriteriaVersionSerializer.Meta.extra_kwargs,
            "system_prompt": {"help_text": "Sent first, as the system message; empty: none is sent."},
            "score_prompt": {
                "help_text": "Turn 1, with {{SESSION_CONVERSATION}}, {{ALERT_DATA}} and {{OUTPUT_SCHEMA}} filled in."
            },
            "followup_prompt": {"help_text": "Turn 2, sent as it is: the missing tools."},
        }

    examples = serializers.ListField(
        child=serializers.DictField(),
        read_only=True,
        help_text=(
            "A calibrated version's worked examples (empty for others), part of its hash: each with "
            "session_id, alert_type, judge_score, reviewer_score, note and excerpt (a bounded excerpt of "
            "what the judge read). Placed at {{CALIBRATION_EXAMPLES}}; a session's own is left out "
            "of its prompt."
        ),
    )

    def get_changes(self, version: CriteriaVersion) -> list[dict]:
        return CriteriaChangeSerializer(selectors.changes_of(version), many=True).data


class CriteriaTextsSerializer(serializers.Serializer):
    score_prompt = serializers.CharField(
        trim_whitespace=False, help_text="Must hold {{SESSION_CONVERSATION}}."
    )
    followup_prompt = serializers.CharField(trim_whitespace=False)
    system_prompt = serializers.CharField(trim_whitespace=False, required=False, allow_blank=True, default="")
    description = serializers.CharField(required=False, allow_blank=True, default="")

    def criteria(self) -> Criteria:
        data = self.validated_data
        return Criteria(data["score_prompt"], data["followup_prompt"], data["system_prompt"])


class CriteriaDraftSerializer(CriteriaTextsSerializer):
    scope = serializers.ChoiceField(choices=CriteriaScope.choices, default=CriteriaScope.GLOBAL)
    scope_value = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The alert type or chain id; empty for global.",
    )
    candidate = serializers.BooleanField(
        default=False, help_text="Make it a candidate at once (texts frozen)."
    )


class CalibrateSerializer(serializers.Serializer):
    base_version_id = serializers.IntegerField(help_text="The version whose texts the candidate starts from.")
    size = serializers.IntegerField(
        required=False,
        default=corrections.DEFAULT_EXAMPLES,
        min_value=1,
        max_value=corrections.MAX_EXAMPLES,
        help_text=f"Examples to carry, at most (default {corrections.DEFAULT_EXAMPLES}).",
    )
    description = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Said after what calibration says of it."
    )


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="Why; kept with the change (promotion needs one).",
    )


class RollbackSerializer(ReasonSerializer):
    scope = serializers.ChoiceField(choices=CriteriaScope.choices)
    scope_value = serializers.CharField(required=False, allow_blank=True, default="")


_VERSION_EXAMPLE = {
    "version_id": 2,
    "state": "current",
    "scope": "chain",
    "scope_value": "kubernetes-namespace-terminating-chain",
    "prompt_hash": "5d41402abc4b2a76b9719d911017c592" * 2,
    "description": "Stricter about reading pod logs before concluding.",
    "created_by": "carol",
    "created_at": "2026-11-02T09:15:00Z",
    "updated_at": "2026-11-03T10:00:00Z",
}
_DETAIL_EXAMPLE = {
    **_VERSION_EXAMPLE,
    "system_prompt": "",
    "score_prompt": "You are ...\n{{SESSION_CONVERSATION}}\n...\n{{ALERT_DATA}}\n...\n{{OUTPUT_SCHEMA}}",
    "followup_prompt": "Based on your analysis above, now identify MCP tools ...",
    "examples": [],
    "changes": [
        {
            "version_id": 2,
            "action": "promote",
            "replaced_version_id": None,
            "restored_version_id": None,
            "changed_by": "carol",
            "changed_at": "2026-11-03T10:00:00Z",
            "reason": "Agrees better with the reviewers on 30 sessions.",
        }
    ],
}
_READ_ERRORS = {401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated.")}
_ERRORS = {
    **_READ_ERRORS,
    403: OpenApiResponse(
        DetailErrorSerializer, description="Writing needs staff or the change_criteria permission."
    ),
}
_NOT_FOUND = {404: OpenApiResponse(DetailErrorSerializer, description="No criteria version with this id.")}
_CONFLICT = {
    409: OpenApiResponse(DetailErrorSerializer, description="Not allowed in the version's or scope's state.")
}
_INVALID = field_errors(
    "Texts that cannot judge, or a bad scope (a `detail` saying what is wrong, messages by field too).",
    {"score_prompt": ["This field is required."]},
)


def _refused(exc: services.CriteriaError) -> Response:
    code = (
        status.HTTP_409_CONFLICT
        if isinstance(exc, services.CriteriaConflict)
        else status.HTTP_400_BAD_REQUEST
    )
    return Response({"detail": str(exc)}, status=code)


def _version(version_id: int) -> CriteriaVersion:
    version = CriteriaVersion.objects.filter(pk=version_id).first()
    if version is None:
        raise NotFound(f"no criteria version {version_id}")
    return version


def _detail(version_id: int, code: int = status.HTTP_200_OK) -> Response:
    return Response(CriteriaVersionDetailSerializer(_version(version_id)).data, status=code)


class CriteriaListView(generics.ListAPIView):
    """List the criteria versions, or create a draft."""

    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]
    queryset = CriteriaVersion.objects.none()  # for the schema; reads go through selectors
    serializer_class = CriteriaVersionSerializer

    @extend_schema(
        summary="List the criteria versions",
        description="Every version, newest first, 50 a page, without its texts (GET one for them).",
        parameters=[
            OpenApiParameter("state", enum=CriteriaState.values, description="Only versions in this state."),
            OpenApiParameter("scope", enum=CriteriaScope.values, description="Only versions of this scope."),
        ],
        examples=[OpenApiExample("A chain's current version", value=_VERSION_EXAMPLE, response_only=True)],
        responses={200: CriteriaVersionSerializer(many=True), 400: _INVALID, **_READ_ERRORS},
    )
    def get(self, request):
        state, scope = request.query_params.get("state"), request.query_params.get("scope")
        for name, value, allowed in (
            ("state", state, CriteriaState.values),
            ("scope", scope, CriteriaScope.values),
        ):
            if value and value not in allowed:
                return Response(
                    {
                        "detail": f"{name}: must be one of {', '.join(allowed)}, not {value!r}",
                        name: ["Not a choice."],
                    },
                    status=status.HTTP_400_BAD_REQUEST,
                )
        page = self.paginate_queryset(selectors.criteria_versions(state=state, scope=scope))
        return self.get_paginated_response(CriteriaVersionSerializer(page, many=True).data)

    @extend_schema(
        summary="Create a draft",
        description=(
            "A new draft holding these texts, for a scope; with `candidate`, a candidate at once. It judges "
            "nothing until it is promoted. Needs staff or the `change_criteria` permission."
        ),
        request=CriteriaDraftSerializer,
        responses={
            201: OpenApiResponse(
                CriteriaVersionDetailSerializer, examples=[OpenApiExample("Created", _DETAIL_EXAMPLE)]
            ),
            400: _INVALID,
            **_ERRORS,
        },
    )
    def post(self, request):
        body = CriteriaDraftSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        by = request.user.get_username()
        try:
            version = services.create_draft(
                body.criteria(),
                scope=body.validated_data["scope"],
                scope_value=body.validated_data["scope_value"],
                description=body.validated_data["description"],
                created_by=by,
            )
            if body.validated_data["candidate"]:
                services.make_candidate(version.pk, changed_by=by)
        except services.CriteriaError as exc:
            return _refused(exc)
        return _detail(version.pk, status.HTTP_201_CREATED)


class CriteriaDetailView(APIView):
    """One criteria version with its texts and its changes; edit a draft."""

    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]

    @extend_schema(
        summary="Get a criteria version",
        description="The version, its texts and every recorded change involving it.",
        responses={
            200: OpenApiResponse(
                CriteriaVersionDetailSerializer, examples=[OpenApiExample("One", _DETAIL_EXAMPLE)]
            ),
            **_ERRORS,
            **_NOT_FOUND,
        },
    )
    def get(self, request, version_id: int):
        return _detail(version_id)

    @extend_schema(
        summary="Edit a draft",
        description="Replace a draft's texts and description (its hash follows). Only a draft changes.",
        request=CriteriaTextsSerializer,
        responses={200: CriteriaVersionDetailSerializer, 400: _INVALID, **_ERRORS, **_NOT_FOUND, **_CONFLICT},
    )
    def put(self, request, version_id: int):
        _version(version_id)
        body = CriteriaTextsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.edit_draft(
                version_id,
                body.criteria(),
                description=body.validated_data["description"],
                edited_by=request.user.get_username(),
            )
        except services.CriteriaError as exc:
            return _refused(exc)
        return _detail(version_id)


def _move_view(name: str, move, summary: str, description: str):
    """A view that moves a version from one state to another (``move``: a service function)."""

    class MoveView(APIView):
        permission_classes = [IsAuthenticated, CriteriaWriteAllowed]

        @extend_schema(
            operation_id=f"v1_scoring_criteria_{name}",
            summary=summary,
            description=description + " Needs staff or the `change_criteria` permission.",
            request=ReasonSerializer,
            responses={
                200: CriteriaVersionDetailSerializer,
                400: _INVALID,
                **_ERRORS,
                **_NOT_FOUND,
                **_CONFLICT,
            },
            examples=[
                OpenApiExample(
                    "Why", value={"reason": "Agrees better with the reviewers."}, request_only=True
                )
            ],
        )
        def post(self, request, version_id: int):
            _version(version_id)
            body = ReasonSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            try:
                move(version_id, changed_by=request.user.get_username(), reason=body.validated_data["reason"])
            except services.CriteriaError as exc:
                return _refused(exc)
            return _detail(version_id)

    MoveView.__name__ = MoveView.__qualname__ = f"Criteria{name.title()}View"
    return MoveView


CriteriaCandidateView = _move_view(
    "candidate", services.make_candidate, "Make a draft a candidate", "Freezes the draft's texts."
)
CriteriaPromoteView = _move_view(
    "promote",
    services.promote,
    "Promote a candidate",
    "Makes the candidate the current version of its scope and retires the one it replaces; from then "
    "on the scope's sessions are judged by it and their older scores are obsolete. Needs a reason.",
)
CriteriaRetireView = _move_view(
    "retire",
    services.retire,
    "Retire a draft or candidate",
    "Sets it aside; a current version is not retired.",
)


class CriteriaRollbackView(APIView):
    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]

    @extend_schema(
        summary="Roll a scope back",
        description=(
            "Retires the scope's current version and makes current again the version its promotion "
            "replaced; a scope other than global whose version replaced none is left without one (its "
            "sessions fall back to the wider scope). Needs a reason, and staff or the `change_criteria` "
            "permission."
        ),
        request=RollbackSerializer,
        responses={200: CriteriaChangeSerializer, 400: _INVALID, **_ERRORS, **_CONFLICT},
        examples=[
            OpenApiExample(
                "A chain's criteria",
                value={
                    "scope": "chain",
                    "scope_value": "kubernetes-namespace-terminating-chain",
                    "reason": "Too harsh.",
                },
                request_only=True,
            )
        ],
    )
    def post(self, request):
        body = RollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            change = services.rollback(changed_by=request.user.get_username(), **body.validated_data)
        except services.CriteriaError as exc:
            return _refused(exc)
        return Response(CriteriaChangeSerializer(change).data)


class CriteriaCalibrateView(APIView):
    permission_classes = [IsAuthenticated, CriteriaWriteAllowed]

    @extend_schema(
        summary="Build a calibrated candidate",
        description=(
            "A new candidate of the base version's scope, with the base's texts and up to `size` reviewers' "
            f"corrections (a reviewer's score {corrections.MIN_CORRECTION} or more points from the judge's, "
            "with a note) as worked examples, chosen to cover the score bands and alert types. It has a hash "
            "of its own and judges nothing until promoted: try it first. Needs staff or the "
            "`change_criteria` permission."
        ),
        request=CalibrateSerializer,
        responses={
            201: CriteriaVersionDetailSerializer,
            400: _INVALID,
            **_ERRORS,
            404: OpenApiResponse(DetailErrorSerializer, description="No criteria version base_version_id."),
        },
        examples=[OpenApiExample("Six examples", value={"base_version_id": 1, "size": 6}, request_only=True)],
    )
    def post(self, request):
        body = CalibrateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        _version(body.validated_data["base_version_id"])
        try:
            version = services.build_calibrated_candidate(
                body.validated_data["base_version_id"],
                size=body.validated_data["size"],
                description=body.validated_data["description"],
                created_by=request.user.get_username(),
            )
        except services.CriteriaError as exc:
            return _refused(exc)
        return _detail(version.pk, status.HTTP_201_CREATED)
