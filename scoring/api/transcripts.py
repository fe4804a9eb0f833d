"""``/api/v1/scoring/scores/{score_id}/transcript``: what the judge was sent and what it wrote
for one score (``ScoreTranscript``), for the service's staff only (docs/scoring.md, "Transcripts")."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from scoring import selectors
from scoring.api.errors import DetailErrorSerializer
from scoring.api.permissions import StaffOnly
from scoring.models import SessionScore


class TranscriptMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["user", "assistant"])
    content = serializers.JSONField(
        help_text="As sent or as the judge wrote it: a text, or (a prompt sent with a cache breakpoint) "
        "a list of content blocks."
    )


class TranscriptConversationSerializer(serializers.Serializer):
    messages = TranscriptMessageSerializer(
        many=True,
        help_text="The messages the conversation's last call sent, after fitting, then the judge's reply. A "
        "conversation is turn 1 (one per sample), with the restatement and evaluation follow-ups it needed, "
        "and turn 2 after the sample it continues; it ends in a user message when its last call failed.",
    )
    error = serializers.CharField(allow_null=True, help_text="Why its last call failed; null when it did not.")


class TranscriptSerializer(serializers.Serializer):
    score_id = serializers.UUIDField()
    recorded_at_us = serializers.IntegerField(help_text="When it was stored (microseconds since the epoch).")
    model = serializers.CharField(help_text="The judge model the calls went to (litellm's name).")
    temperature = serializers.FloatField(allow_null=True, help_text="The temperature sent; null: none.")
    seed = serializers.IntegerField(allow_null=True, help_text="The seed sent; null: none.")
    conversations = TranscriptConversationSerializer(
        many=True, help_text="In the order they started; a second try fitted to a smaller window follows the first."
    )


_EXAMPLE = {
    "score_id": "0b6f3c1e-8a4d-4f1b-9a57-2c1d9e7b5a10",
    "recorded_at_us": 1763900042000000,
    "model": "openai/qwen2.5-coder-1.5b",
    "temperature": 0.0,
    "seed": 0,
    "conversations": [
        {
            "messages": [
                {"role": "user", "content": "You are a computer security expert ..."},
                {"role": "assistant", "content": "**Total Score:** 54"},
                {"role": "user", "content": "Your previous response gave a score without the critical evaluation ..."},
                {"role": "assistant", "content": "The agent listed the pods ... however ...\n\n52"},
                {"role": "user", "content": "Based on your analysis above, now identify MCP tools ..."},
                {"role": "assistant", "content": "1. **kubectl-logs**: ..."},
            ],
            "error": None,
        }
    ],
}


class ScoreTranscriptView(APIView):
    """A score's transcript, for staff."""

    permission_classes = [IsAuthenticated, StaffOnly]

    @extend_schema(
        summary="Get what the judge saw and wrote for a score (staff only)",
        description=(
            "Every message the judge was sent for this score, as sent after fitting the session to its "
            "window, and every raw reply, restatements and follow-ups included, with the model and sampling "
            "settings: completed and failed scores alike. For staff only (they hold the session's data and "
            "the judge's text as written). Kept SCORING_TRANSCRIPT_RETENTION_DAYS days."
        ),
        responses={
            200: OpenApiResponse(TranscriptSerializer, examples=[OpenApiExample("A follow-up asked", value=_EXAMPLE)]),
            401: OpenApiResponse(DetailErrorSerializer, description="Not authenticated."),
            403: OpenApiResponse(DetailErrorSerializer, description="Not staff."),
            404: OpenApiResponse(
                DetailErrorSerializer,
                description="No score with this id, or none kept of it (past its retention, made before "
                "transcripts were kept, or not scored yet).",
            ),
        },
    )
    def get(self, request, score_id: str):
        try:
            key = selectors.score_key(score_id)
            transcript = selectors.score_transcript(key)
        except SessionScore.DoesNotExist as exc:
            raise NotFound(str(exc)) from None
        if transcript is None:
            raise NotFound(
                f"No transcript of score {key} is kept: it is past SCORING_TRANSCRIPT_RETENTION_DAYS, was made "
                "before transcripts were kept, or has not been judged yet."
            )
        return Response({"score_id": key, "recorded_at_us": transcript.recorded_at_us, **transcript.transcript})
