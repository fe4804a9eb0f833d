"""The judge's two-turn conversation about one session.

Turn 1 sends the score prompt and takes the total score from the last line of
the reply; turn 2 sends the missing-tools follow-up in the same conversation,
so the judge sees its own turn-1 analysis. A turn-1 reply that gives a score without the
evaluation the criteria ask for (``replies.has_evaluation``) is asked once, in the same
conversation, for that evaluation; if it still has none, turn 2 is not sent (there is no
analysis to base it on) and the score is marked (``JudgeResult.analysis_missing``). The turn-1 prompt is first fitted to the judge
model's context window (``fitting``), with room for both replies. Turn 2 resends turn 1's
messages as they were, so that the provider can serve them from its prompt cache; where
the model caches only what the request marks (Claude), turn 1's prompt ends in a cache
breakpoint (docs/llm.md, "Prompt caching").

With SCORING_JUDGE_SAMPLES=k above 1, turn 1 is sampled k times at once: the
score is the samples' median (of those with an evaluation, if any has one) and turn 2
continues the median sample's conversation (docs/scoring.md, "Samples").

Every call's messages as sent and every reply are kept in a ``Transcript``, with the
sampling settings, for the score's record (docs/scoring.md, "Transcripts").
"""

import copy
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings

from scoring.judge import calibration, errors, fitting, injection, llm, replies, sampling
from scoring.judge.prompts import (
    EVALUATION_FOLLOWUP_PROMPT,
    OUTPUT_SCHEMA_SCORE,
    RESTATE_SCORE_PROMPT,
    SHIPPED_CRITERIA,
    Criteria,
    fill_placeholders,
)
from scoring.judge.rendering import render_alert_data, render_investigation, render_investigation_parts
from scoring.models import COST_QUANTUM
from scoring.realtime import events

# Markdown emphasis a judge may wrap its score line in ("**75**", "`75`").
_EMPHASIS = re.compile(r"[*_`]+")
# EP-0028's pattern, `(\d+)\s*$`, anchored so that "-1" or "7.5" do not pass
# as 1 or 5: the digits must not follow a sign, decimal point or slash.
_SCORE_AT_END = re.compile(r"(?<![\d.\-+/])(\d+)\s*$")
RAW_REPLY_TAIL_CHARS = 500

logger = logging.getLogger(__name__)


@dataclass
class JudgeResult:
    total_score: int
    score_analysis: str
    missing_tools_analysis: str | None  # None: turn 2 was not asked (no evaluation to base it on)
    judge_model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal | None = None
    cached_input_tokens: int = 0  # of input_tokens, those read from the provider's prompt cache
    # With several samples: each one's score as sampled (None for a sample that failed),
    # max - min of those scores (None under two), and whether that is over SCORING_UNSTABLE_SPREAD.
    score_samples: list[int | None] | None = None
    score_spread: int | None = None
    unstable: bool = False
    # The share of the investigation the judge saw (1.0 unless fitting its window cut tool
    # results), and the warning naming what was cut.
    input_coverage: float = 1.0
    input_warning: str | None = None
    # The judge gave no evaluation with its score, even when asked once more.
    analysis_missing: bool = False
    judge_sampling: sampling.Sampling = field(default_factory=lambda: sampling.Sampling(None, None))


@dataclass
class _Sample:
    """One turn 1: its score, its analysis, and its conversation, for turn 2 to continue."""

    score: int
    analysis: str
    messages: list[dict]
    evaluated: bool  # the analysis holds an evaluation (``replies.has_evaluation``)
    recorded: "RecordedConversation"  # where turn 2 is recorded, after this turn 1


class RecordedConversation:
    """One conversation of a ``Transcript``: the messages its last call sent, then the reply."""

    def __init__(self):
        self.messages: list[dict] = []
        self.error: str | None = None

    def ask(self, ask: Callable[[list[dict]], str], messages: list[dict]) -> str:
        """``ask(messages)``, recorded."""
        self.messages = copy.deepcopy(messages)  # the caller's list grows with the next calls
        try:
            reply = ask(messages)
        except errors.JudgeLLMError as error:
            self.error = str(error)
            raise
        self.messages.append({"role": "assistant", "content": reply})
        return reply

    def as_json(self) -> dict:
        return {"messages": copy.deepcopy(self.messages), "error": self.error}


class Transcript:
    """What the judge was sent and what it wrote in one scoring: each conversation (a turn-1
    sample and what followed it; both tries when a context-length error made the scoring fit
    its prompt smaller) as its last call sent it, then the reply; a call that failed leaves its
    conversation ending in the message it was not answered, with the error. Kept with the
    score (``ScoreTranscript``) whether it completes or fails."""

    def __init__(self):
        self._lock = threading.Lock()  # samples start their conversations from threads of their own
        self.conversations: list[RecordedConversation] = []
        self.model = ""
        self.sampling = sampling.Sampling(None, None)

    def new_conversation(self) -> RecordedConversation:
        conversation = RecordedConversation()
        with self._lock:
            self.conversations.append(conversation)
        return conversation

    def as_json(self) -> dict:
        """The transcript as stored (``ScoreTranscript.transcript``, docs/scoring.md, "Transcripts")."""
        with self._lock:
            conversations = list(self.conversations)
        return {
            "model": self.model,
            "temperature": self.sampling.temperature,
            "seed": self.sampling.seed,
            "conversations": [conversation.as_json() for conversation in conversations],
        }


def build_score_prompt(
    session,
    *,
    criteria: Criteria = SHIPPED_CRITERIA,
    boundary_token: str | None = None,
    investigation: str | None = None,
) -> str:
    """The turn-1 prompt: the criteria's score prompt with the session filled in
    (``investigation``: its rendered text, shortened or not; by default the session's).
    The shipped criteria by default: what the token estimates count.

    The session's values are untrusted, so each is fenced between boundary
    markers with a random token drawn for this prompt (``boundary_token`` fixes
    it, for tests); see ``scoring.judge.injection``. A calibrated version's worked
    examples are fenced alike (``calibration``); since they are in every prompt the
    fitter builds, fitting leaves room for them.
    """
    token = boundary_token or injection.new_boundary_token()
    if investigation is None:
        investigation = render_investigation(session)
    return fill_placeholders(
        criteria.score_prompt,
        {
            "SESSION_CONVERSATION": injection.wrap_untrusted(investigation, token),
            "ALERT_DATA": injection.wrap_untrusted(render_alert_data(session.alert_data), token),
            "OUTPUT_SCHEMA": OUTPUT_SCHEMA_SCORE,
            "CALIBRATION_EXAMPLES": calibration.render_examples(criteria.examples, token, session.session_id),
        },
    )


def score_prompt_fitter(
    session, criteria: Criteria = SHIPPED_CRITERIA
) -> Callable[[int], fitting.FittedPrompt]:
    """A function that fits ``session``'s turn-1 prompt to a context window (``fitting``), as
    the judge is sent it: the session rendered once, one boundary token for every window tried.
    Raises as ``fitting.fit_prompt`` does."""
    parts = render_investigation_parts(session)
    token = injection.new_boundary_token()

    def build(investigation: str) -> str:
        return build_score_prompt(
            session, criteria=criteria, boundary_token=token, investigation=investigation
        )

    return lambda window: fitting.fit_prompt(parts, build, window, criteria)


def extract_score(reply: str) -> tuple[int | None, str]:
    """Return (score, analysis): the score on the reply's last non-empty line,
    and the reply without that line. The score is None if the last line does
    not end in an integer from 0 to 100; the analysis is then the whole reply.
    """
    text = reply.rstrip()
    head, _, last_line = text.rpartition("\n")
    match = _SCORE_AT_END.search(_EMPHASIS.sub("", last_line))
    if match is None or not 0 <= int(match.group(1)) <= 100:
        return None, text
    return int(match.group(1)), head.rstrip()


class _Usage:
    """Adds up tokens and cost over the conversation's calls, samples' threads included."""

    def __init__(self):
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_input_tokens = 0
        self.cost_usd: Decimal | None = None
        self.model = ""
        self._lock = threading.Lock()

    def add(self, reply: llm.LLMReply) -> str:
        with self._lock:
            self.input_tokens += reply.input_tokens or 0
            self.output_tokens += reply.output_tokens or 0
            self.cached_input_tokens += reply.cached_input_tokens or 0
            if reply.cost_usd is not None:
                self.cost_usd = (self.cost_usd or Decimal(0)) + reply.cost_usd
            self.model = reply.model
        return reply.content

    def spent(self) -> dict:
        """The score's fields for what the calls answered so far used and cost; empty before any."""
        if not self.model:
            return {}
        cost = self.cost_usd.quantize(COST_QUANTUM) if self.cost_usd is not None else None
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cost_usd": cost,
        }


def run_judge(
    session,
    *,
    criteria: Criteria = SHIPPED_CRITERIA,
    on_phase: Callable[[str], None],
    deadline: llm.Deadline | None = None,
    transcript: Transcript | None = None,
) -> JudgeResult:
    """Hold the two-turn judge conversation about ``session`` under ``criteria``, recording it
    in ``transcript``.

    ``on_phase`` is told when each turn starts. Raises ``errors.JudgeLLMError``
    (or its subclass ``ScoreExtractionError``) when the judge cannot be used,
    and ``errors.InputTooLarge`` before any call when the prompt is over
    SCORING_MAX_INPUT_TOKENS or cannot be fitted to the judge model's window; an error
    raised once the prompt was fitted carries its coverage and warning.
    The prompt is fitted to the window (``fitting``); on a context-length error
    the conversation is held once more, fitted to the window the error taught.
    """
    fit = score_prompt_fitter(session, criteria)
    usage = _Usage()  # both tries': a turn 1 answered before turn 2 was refused is paid for too
    transcript = transcript if transcript is not None else Transcript()
    transcript.model = sampling.judge_model()
    transcript.sampling = sampling.judge_sampling()
    window = fitting.context_window()
    fitted = fit(window)
    try:
        try:
            return _converse(criteria, fitted, usage, on_phase, deadline, transcript)
        except errors.ContextWindowExceeded as error:
            smaller = fitting.learn_window(str(error), window)
            logger.warning(
                "judge context window exceeded at %s tokens; once more, fitted to %s: %s",
                window,
                smaller,
                error,
            )
            fitted = fit(smaller)
            return _converse(criteria, fitted, usage, on_phase, deadline, transcript)
    except errors.JudgeLLMError as error:  # the failed score keeps what the judge was sent, and what it cost
        error.input_coverage, error.input_warning = fitted.coverage, fitted.warning
        error.spent = usage.spent()
        raise


def _converse(
    criteria: Criteria,
    fitted: fitting.FittedPrompt,
    usage: _Usage,
    on_phase: Callable[[str], None],
    deadline: llm.Deadline | None,
    transcript: Transcript,
) -> JudgeResult:
    opening = _opening_messages(criteria, fitted.prompt)
    reply_cap = sampling.judge_reply_cap()
    on_phase(events.PHASE_ANALYZING)
    if settings.SCORING_JUDGE_SAMPLES == 1:
        chosen = _score_sample(
            opening,
            lambda messages: usage.add(llm.complete(messages, deadline=deadline, max_tokens=reply_cap)),
            transcript.new_conversation(),
        )
        stability = {}
    else:
        chosen, stability = _median_sample(
            opening, settings.SCORING_JUDGE_SAMPLES, usage, deadline, transcript
        )

    missing_tools_analysis = None
    if chosen.evaluated:
        on_phase(events.PHASE_MISSING_TOOLS)
        messages = [*chosen.messages, {"role": "user", "content": criteria.followup_prompt}]
        # Patient: sent back to the queue now, the scoring would ask turn 1 again.
        missing_tools_analysis = chosen.recorded.ask(
            lambda messages: usage.add(
                llm.complete(messages, deadline=deadline, patient=True, max_tokens=reply_cap)
            ),
            messages,
        )
    else:
        logger.warning("the judge gave its score without an evaluation, even when asked again: turn 2 not sent")

    return JudgeResult(
        total_score=chosen.score,
        score_analysis=chosen.analysis,
        missing_tools_analysis=missing_tools_analysis,
        judge_model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=usage.cost_usd,
        cached_input_tokens=usage.cached_input_tokens,
        input_coverage=fitted.coverage,
        input_warning=fitted.warning,
        analysis_missing=not chosen.evaluated,
        judge_sampling=transcript.sampling,
        **stability,
    )


def _opening_messages(criteria: Criteria, prompt: str) -> list[dict]:
    """Turn 1's messages: the criteria's system prompt if they have one, then the prompt as the
    user's message. Where the model caches only up to a marked block, the prompt is one text
    block marked as a cache breakpoint: every later call of the conversation (restate, turn 2)
    resends these same messages, so the provider reads them from its cache."""
    system = [{"role": "system", "content": criteria.system_prompt}] if criteria.system_prompt else []
    if not llm.takes_cache_breakpoints():
        return [*system, {"role": "user", "content": prompt}]
    block = {"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}
    return [*system, {"role": "user", "content": [block]}]


def _score_sample(
    opening: list[dict], ask_judge: Callable[[list[dict]], str], recorded: RecordedConversation
) -> _Sample:
    """Turn 1, recorded in ``recorded``: the score prompt, and the score from the reply's last
    line (the judge is asked once, in the same conversation, to restate a missing one); a reply
    whose analysis holds no evaluation is asked once for it (``_ask_for_evaluation``)."""

    def ask(messages: list[dict]) -> str:
        return recorded.ask(ask_judge, messages)

    messages = [*opening]
    turn1 = ask(messages)
    messages.append({"role": "assistant", "content": turn1})
    total_score, score_analysis = extract_score(turn1)
    if total_score is None:
        messages.append({"role": "user", "content": RESTATE_SCORE_PROMPT})
        restated = ask(messages)
        messages.append({"role": "assistant", "content": restated})
        total_score, _ = extract_score(restated)
        if total_score is None:
            raise errors.ScoreExtractionError(
                "judge reply has no 0-100 score on its last line, even when asked to restate it; "
                f"reply ends with: {turn1[-RAW_REPLY_TAIL_CHARS:]!r}; restated: {restated[-100:]!r}"
            )
    if replies.has_evaluation(score_analysis):
        return _Sample(total_score, score_analysis, messages, True, recorded)
    return _ask_for_evaluation(total_score, score_analysis, messages, ask, recorded)


def _ask_for_evaluation(
    total_score: int, analysis: str, messages: list[dict], ask: Callable[[list[dict]], str], recorded
) -> _Sample:
    """Turn 1 gave ``total_score`` without an evaluation: ask for it once, in the same
    conversation. The follow-up's analysis is kept when it holds an evaluation, or turn 1
    gave none at all, with its score when it ends with one (else turn 1's stands)."""
    messages.append({"role": "user", "content": EVALUATION_FOLLOWUP_PROMPT})
    followup = ask(messages)
    messages.append({"role": "assistant", "content": followup})
    followup_score, followup_analysis = extract_score(followup)
    if replies.has_evaluation(followup_analysis) or not analysis.strip():
        total_score = total_score if followup_score is None else followup_score
        analysis = followup_analysis
    return _Sample(total_score, analysis, messages, replies.has_evaluation(analysis), recorded)


def _median_sample(
    opening: list[dict], k: int, usage: _Usage, deadline: llm.Deadline | None, transcript: Transcript
) -> tuple[_Sample, dict]:
    """Turn 1 ``k`` times at once; the sample whose score is the median, and the
    ``JudgeResult`` fields that say how far the samples agree. The median is of the samples
    with an evaluation when any has one (a score given without one is the judge skipping
    the criteria, not its judgement); the spread is of every sample.

    A sample held back by the provider's quota sends the whole scoring back to wait
    (``errors.RateLimited``). A sample that fails (the provider, after its retries, or no score even when restated)
    is left out; the scoring fails only when every sample fails. For an even count the
    median is the lower middle score, so that it is a sample's and turn 2 can continue
    that sample's conversation (the first such sample, in sampling order).
    """

    def sample(ask: llm.Ask) -> _Sample:
        return _score_sample(
            opening, lambda messages: usage.add(ask(messages)), transcript.new_conversation()
        )

    outcomes = llm.run_concurrently([sample] * k, deadline=deadline, max_tokens=sampling.judge_reply_cap())
    # A quota is capacity, not a sample's failure: the scoring waits for it with all k samples.
    rate_limited = next((outcome for outcome in outcomes if isinstance(outcome, errors.RateLimited)), None)
    if rate_limited is not None:
        raise rate_limited
    for position, outcome in enumerate(outcomes, start=1):
        if isinstance(outcome, errors.JudgeLLMError):
            logger.warning("judge sample %d of %d failed: %s", position, k, outcome)
        elif not isinstance(outcome, _Sample):
            raise outcome  # a bug, not the judge: the scoring fails as an unexpected error
    samples = [outcome for outcome in outcomes if isinstance(outcome, _Sample)]
    if not samples:
        reasons = list(dict.fromkeys(str(outcome) for outcome in outcomes))
        # Too long for the window for every sample: run_judge fits the prompt smaller once more.
        failed_as = errors.ContextWindowExceeded if any(
            isinstance(outcome, errors.ContextWindowExceeded) for outcome in outcomes
        ) else errors.JudgeLLMError
        raise failed_as(f"all {k} judge samples failed: " + "; ".join(reasons)) from outcomes[0]
    scores = sorted(sample.score for sample in samples)
    spread = scores[-1] - scores[0] if len(scores) > 1 else None
    candidates = [sample for sample in samples if sample.evaluated] or samples
    median = sorted(sample.score for sample in candidates)[(len(candidates) - 1) // 2]
    stability = {
        "score_samples": [outcome.score if isinstance(outcome, _Sample) else None for outcome in outcomes],
        "score_spread": spread,
        "unstable": spread is not None and spread > settings.SCORING_UNSTABLE_SPREAD,
    }
    return next(sample for sample in candidates if sample.score == median), stability
