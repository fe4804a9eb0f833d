"""What users are shown of a failed judge job's recorded error (scoring/failures.py)."""

import pytest
from django.contrib.auth.models import AnonymousUser, User

from scoring import failures

# What a provider may answer: a key's start, an internal address.
PROVIDER_TEXT = "Incorrect API key provided: sk-proj-abc***xyz; see https://llm-gateway.internal:8443/keys"


@pytest.mark.parametrize(
    ("recorded", "shown"),
    [
        (f"judge LLM provider error (401) after 1 attempt: {PROVIDER_TEXT}",
         "the judge model's provider answered with an error"),
        ("could not connect to the judge LLM at http://10.0.0.5:8000/v1 (4 attempts): Connection error.",
         "the judge model's provider could not be reached"),
        (f"judge LLM rate-limited (429): the provider's quota is used up for now: {PROVIDER_TEXT}",
         "the judge model's quota, or the pace kept to it, held the scoring back for longer than scorings wait"),
        ("judge LLM rate-limited: openai/judge's calls are paced (SCORING_LLM_RPM, SCORING_LLM_TPM, the "
         "provider's announced limits or its Retry-After), and this one's turn is 120.0 s away",
         "the judge model's quota, or the pace kept to it, held the scoring back for longer than scorings wait"),
        (f"judge LLM circuit breaker is open after 5 consecutive failed calls (last: {PROVIDER_TEXT})",
         "the judge model's last calls failed, so new ones were refused for a while"),
        (f"session too large for the judge model: {PROVIDER_TEXT}",
         "the session is too large for the judge model"),
        ("judge reply has no 0-100 score on its last line; reply ends with: 'the session's secret'",
         "the judge's reply had no 0-100 score"),
        ("database error: OperationalError: could not connect to server at 10.0.0.9",
         "the service lost its database during the job"),
        ("unexpected error: KeyError: 'token'", "an unexpected error in the service"),
        ("a message of a kind nobody classed", failures.OTHER_REASON),
    ],
)  # fmt: skip
def test_users_are_shown_a_reason_in_the_services_words_not_the_recorded_text(recorded, shown):
    assert failures.shown_reason(recorded) == shown


@pytest.mark.parametrize(
    "recorded",
    [
        "the judge prompt of this session is about 12,000,000 tokens (estimated at 4 characters a token), "
        "over SCORING_MAX_INPUT_TOKENS=10,000,000: nothing was sent to the judge",
        "no judge model configured: set SCORING_LLM_MODEL",
        "worker shut down",
        "orphaned: in progress for over 900 s without finishing (its worker stopped)",
    ],
)
def test_the_services_own_messages_are_shown_as_recorded(recorded):
    assert failures.shown_reason(recorded) == recorded


def test_a_reports_own_messages_and_the_judges_are_shown_so_too():
    own = "none of the report's scores has a missing-tools analysis any more"
    window = f"a report call was over the judge model's context window; set it below ({PROVIDER_TEXT})"

    assert failures.shown_reason(own, report=True) == own
    assert PROVIDER_TEXT not in failures.shown_reason(window, report=True)
    assert "SCORING_REPORT_WINDOW_TOKENS" in failures.shown_reason(window, report=True)
    assert failures.shown_reason(f"judge LLM provider error (500): {PROVIDER_TEXT}", report=True) == (
        "the judge model's provider answered with an error"
    )
    assert failures.shown_reason(own) == failures.OTHER_REASON  # not a scoring's message


def test_staff_read_the_error_as_recorded_everyone_else_the_reason():
    recorded = f"judge LLM provider error (401) after 1 attempt: {PROVIDER_TEXT}"
    staff, user = User(username="operator", is_staff=True), User(username="alice")

    assert failures.for_caller(recorded, staff) == recorded
    for caller in (user, AnonymousUser(), None):
        assert failures.for_caller(recorded, caller) == "the judge model's provider answered with an error"
    assert failures.for_caller(None, user) is None
