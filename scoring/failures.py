"""Why a judge job failed, by class, from the beginning of its recorded ``error_message``.

A failed scoring or report records its error as it happened, for the service's staff and
its logs: a provider's error text, the address of the judge's API, the end of the judge's
reply, an exception's text. Those are not for every user, so users are shown a reason in
the service's own words instead (``shown_reason``): the pages, the WebSocket's events and,
for callers who are not staff, the API. Messages that are wholly the service's own (its
limits, its workers) are shown as recorded. ``/metrics`` counts failed scorings by the same
classes (scoring/ops/metrics.py; docs/observability.md has the table).
"""

# (error_message beginning, the class /metrics counts it in, what users are shown: None for
# the message itself, which then holds only the service's own words). First match wins.
SCORING_CLASSES = (
    # The provider's 429s and the service's own pacing to its limits or its Retry-After alike.
    ("judge LLM rate-limited", "llm_rate_limited", "the judge model's quota, or the pace kept to it, "
     "held the scoring back for longer than scorings wait"),
    ("judge LLM request timed out", "llm_timeout", "the judge model did not answer in time"),
    ("scoring deadline reached before the judge LLM answered", "llm_timeout",
     "the judge model did not answer within the scoring's time limit"),
    ("judge LLM circuit breaker is open", "circuit_open",
     "the judge model's last calls failed, so new ones were refused for a while"),
    ("session too large for the judge model", "context_window",
     "the session is too large for the judge model"),
    ("judge reply has no 0-100 score", "no_score", "the judge's reply had no 0-100 score"),
    ("judge LLM", "llm_error", "the judge model's provider answered with an error"),
    ("could not connect to the judge LLM", "llm_error", "the judge model's provider could not be reached"),
    ("the judge prompt of this session is about", "input_too_large", None),
    ("no judge model configured", "not_configured", None),
    ("worker shut down", "worker_shutdown", None),
    ("orphaned:", "orphaned", None),
    ("database error", "database_error", "the service lost its database during the job"),
    ("unexpected error", "unexpected", "an unexpected error in the service"),
)  # fmt: skip
OTHER_CLASS = "other"
OTHER_REASON = "the job failed (the service's staff can read why in the admin)"

# A report's own messages, beside the judge's (which report failures share with scorings).
REPORT_CLASSES = (
    ("a report call was over the judge model's context window", None,
     "a report call was over the judge model's context window (SCORING_REPORT_WINDOW_TOKENS is to be "
     "lowered)"),
    ("none of the report's scores", None, None),
    ("a window of", None, None),
    ("the missing-tools analyses of", None, None),
)  # fmt: skip


def shown_reason(error_message: str | None, *, report: bool = False) -> str | None:
    """What users are shown of a recorded error (None for none)."""
    if not error_message:
        return error_message
    classes = REPORT_CLASSES + SCORING_CLASSES if report else SCORING_CLASSES
    for beginning, _, shown in classes:
        if error_message.startswith(beginning):
            return error_message if shown is None else shown
    return OTHER_REASON


def for_caller(error_message: str | None, user, *, report: bool = False) -> str | None:
    """The recorded error for staff, the reason shown to users for anyone else."""
    if user is not None and getattr(user, "is_staff", False):
        return error_message
    return shown_reason(error_message, report=report)
