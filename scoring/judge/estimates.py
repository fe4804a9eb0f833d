"""What scoring each session would send the judge and cost, without a judge call
(``score_sessions --dry-run``, docs/scoring.md "Many sessions at once"), under the criteria
that would judge it.

The turn-1 prompt is fitted to the judge model's window as a scoring fits it
(``conversation.score_prompt_fitter``), so its tokens are those a scoring would send, by
the same count. The cost is litellm's price for the model (no cache discount) of a
scoring's calls: turn 1 (once per sample) and turn 2, which resends the prompt with turn
1's reply and the follow-up; their replies are the mean output of the model's completed
scores, or, with none yet, the room kept for each reply (``sampling.REPLY_MAX_TOKENS``).
"""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from scoring.judge import conversation, fitting, llm, sampling, tokens
from scoring.judge.errors import InputTooLarge
from scoring.judge.prompts import SHIPPED_CRITERIA, Criteria


@dataclass(frozen=True)
class Assumptions:
    """What every estimate of one run assumes."""

    window: int
    window_source: str
    output_tokens: int  # of a whole scoring
    output_from_scores: int  # completed scores the output is the mean of (0: the room kept for replies)

    @classmethod
    def now(cls, mean_output: int | None, scores: int) -> "Assumptions":
        """For the configured judge, whose completed scores' mean output is ``mean_output``
        tokens (of ``scores``; None: none)."""
        window, source = fitting.context_window_and_source()
        calls = settings.SCORING_JUDGE_SAMPLES + 1
        output = mean_output if mean_output is not None else calls * sampling.REPLY_MAX_TOKENS
        return cls(window, source, output, scores if mean_output is not None else 0)


@dataclass(frozen=True)
class ScoringEstimate:
    prompt_tokens: int | None  # turn 1's prompt, fitted; None when it would fail before any call
    coverage: float | None  # of the investigation the prompt holds (below 1: cut)
    cut_results: int  # tool results shortened
    input_tokens: int | None  # of the whole scoring
    cost_usd: Decimal | None  # None when litellm has no price for the model
    failure: str | None = None  # why it would fail without a judge call

    @property
    def cut(self) -> bool:
        return bool(self.cut_results)


def estimate(session, assumptions: Assumptions, criteria: Criteria = SHIPPED_CRITERIA) -> ScoringEstimate:
    """What scoring ``session`` under ``criteria`` would send and cost."""
    try:
        fitted = conversation.score_prompt_fitter(session, criteria)(assumptions.window)
    except InputTooLarge as error:
        return ScoringEstimate(None, None, 0, None, None, str(error))
    turn_ones = settings.SCORING_JUDGE_SAMPLES
    reply = assumptions.output_tokens // (turn_ones + 1)
    # Every call opens with the system prompt, if any, and the prompt; turn 2 adds the follow-up.
    opening = fitted.tokens + (tokens.count(criteria.system_prompt) if criteria.system_prompt else 0)
    input_tokens = (turn_ones + 1) * opening + reply + tokens.count(criteria.followup_prompt)
    cost = llm.cost_usd_of(input_tokens, assumptions.output_tokens)
    return ScoringEstimate(fitted.tokens, fitted.coverage, len(fitted.cuts), input_tokens, cost)
