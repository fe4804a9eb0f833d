"""The judge's errors: what ``llm.complete`` and ``conversation.run_judge`` raise.

In a module of their own so that the circuit breaker, which the LLM client calls,
can raise them without importing that client back.
``str(error)`` is meant for operators and is stored with the failed score.
"""


class JudgeLLMError(Exception):
    """A judge call failed."""

    # Whether the failure says something about the provider, for the circuit breaker.
    counts_for_circuit = True
    # What the judge was sent, when the failure came after the prompt was fitted to its window:
    # the share of the investigation it held and the warning naming what was cut
    # (``conversation.run_judge``), kept with the failed score.
    input_coverage: float | None = None
    input_warning: str | None = None
    # What the calls answered before the failure used and cost (``conversation.run_judge``): the
    # failed score's input_tokens, output_tokens, cached_input_tokens and cost_usd; empty when
    # none was answered. The spend budgets count that cost too.
    spent: dict = {}


# Each error takes its message as first argument so that it survives pickling
# (django-q2 pickles what a task raises).


class JudgeNotConfigured(JudgeLLMError):
    def __init__(self, message: str = "no judge model configured: set SCORING_LLM_MODEL"):
        super().__init__(message)


class CircuitOpen(JudgeLLMError):
    """Recent calls all failed; new calls fail fast until the cool-down ends."""


class ContextWindowExceeded(JudgeLLMError):
    """The session is too large for the model: the session's fault, not the provider's."""

    counts_for_circuit = False


class InputTooLarge(JudgeLLMError):
    """The prompt is over SCORING_MAX_INPUT_TOKENS: refused before any call, the session's fault."""

    counts_for_circuit = False


class DeadlineReached(JudgeLLMError):
    def __init__(self, message: str, provider_failed: bool = False):
        super().__init__(message)
        self.counts_for_circuit = provider_failed


class RateLimited(JudgeLLMError):
    """The provider's quota (HTTP 429) still says wait after the call waited in place as long
    as it may (SCORING_LLM_MAX_RETRY_AFTER_S): capacity, not failure. The scoring goes back to
    the queue for ``retry_after_s`` (docs/llm.md, "Quotas")."""

    counts_for_circuit = False

    def __init__(self, message: str, retry_after_s: float = 0.0):
        super().__init__(message, retry_after_s)
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return self.args[0]


class ScoreExtractionError(JudgeLLMError):
    """The judge gave no usable 0-100 score, even when asked to restate it."""
