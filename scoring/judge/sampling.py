"""The judge's identity: the model its calls go to (SCORING_LLM_MODEL, or the one a trial tries),
its sampling settings (the temperature and seed each judge call sends), and how a score names
the judge that made it (docs/llm.md, "Sampling").

A setting is sent only where the judge model takes it, by litellm's rules: a seed to the
providers that accept one (OpenAI and OpenAI-compatible servers, Gemini, ...; not Anthropic's
Claude), a temperature to every model but those that take only their default (OpenAI's
reasoning models). What was not sent is recorded as None: the provider's default applied.
Each judge call also caps its reply's length (``REPLY_MAX_TOKENS``), reasoning models aside.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache

from django.conf import settings

logger = logging.getLogger(__name__)

# The most a judge reply may write (sent as ``max_tokens``), and so the room fitting keeps for
# each reply: a model that runs on (a small local one repeating a list) stops there, not at its
# window's end or at the job's deadline. Not sent to reasoning models (OpenAI's o-series and
# GPT-5, Gemini 2.5, Claude 4), whose hidden thinking would count against it.
REPLY_MAX_TOKENS = 4_096


# The model a trial tries in this context (a trial scoring's thread, and the sample threads it
# starts, which copy its context); None: the configured one.
_tried_model: ContextVar[str | None] = ContextVar("tried_judge_model", default=None)


def judge_model() -> str:
    """The model judge calls go to here: the one a trial tries (``judging_with``), else
    SCORING_LLM_MODEL ("" when it is not set)."""
    return _tried_model.get() or settings.SCORING_LLM_MODEL


@contextmanager
def judging_with(model: str) -> Iterator[None]:
    """Send this context's judge calls to ``model`` ("": the configured one), through the same
    SCORING_LLM_API_BASE and key: what a trial of a judge model does."""
    token = _tried_model.set(model or None)
    try:
        yield
    finally:
        _tried_model.reset(token)


@dataclass(frozen=True)
class Sampling:
    temperature: float | None  # None: not sent, the provider's default applies
    seed: int | None

    def request_params(self) -> dict:
        """The sampling parameters of a judge call (those that are sent)."""
        return {name: value for name, value in (("temperature", self.temperature), ("seed", self.seed)) if value is not None}


def judge_sampling() -> Sampling:
    """What the judge calls send of SCORING_LLM_TEMPERATURE and SCORING_LLM_SEED to the
    judge model (``judge_model``)."""
    return _sampling_for(judge_model(), settings.SCORING_LLM_TEMPERATURE, settings.SCORING_LLM_SEED)


@cache
def _sampling_for(model: str, temperature: float | None, seed: int | None) -> Sampling:
    """Decided once per process and settings: litellm's model rules are a local table."""
    if not model:
        return Sampling(temperature, seed)
    import litellm
    from litellm.utils import get_optional_params

    try:
        _, provider, _, _ = litellm.get_llm_provider(model)
        supported = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider) or []
    except Exception:  # noqa: BLE001 - a model litellm cannot place: its call fails saying why
        return Sampling(temperature, seed)
    if seed is not None and "seed" not in supported:
        logger.info("the judge model %s takes no seed: SCORING_LLM_SEED is not sent", model)
        seed = None
    if temperature is not None:
        try:
            get_optional_params(model=model, custom_llm_provider=provider, temperature=temperature)
        except litellm.UnsupportedParamsError as error:
            logger.warning(
                "the judge model %s does not take SCORING_LLM_TEMPERATURE=%g, so none is sent (its default "
                "applies): %s", model, temperature, error,
            )  # fmt: skip
            temperature = None
    return Sampling(temperature, seed)


def judge_reply_cap() -> int | None:
    """The ``max_tokens`` each judge call sends to the judge model; None: none is sent."""
    return _reply_cap_for(judge_model())


@cache
def _reply_cap_for(model: str) -> int | None:
    if not model:
        return REPLY_MAX_TOKENS
    import litellm

    try:
        reasoning = litellm.supports_reasoning(model)
    except Exception:  # noqa: BLE001 - a model litellm cannot place is not known to reason
        reasoning = False
    return None if reasoning else REPLY_MAX_TOKENS


def judge_label(model: str | None, temperature: float | None, seed: int | None) -> str:
    """The judge's identity as shown and grouped by: its model, and the sampling settings it
    was sent, if any (``gemini/gemini-2.5-pro (temperature 0, seed 0)``). Scores made before
    sampling settings were sent, or with none sent, are named by the model alone."""
    settings_sent = [f"temperature {temperature:g}"] if temperature is not None else []
    settings_sent += [f"seed {seed}"] if seed is not None else []
    return f"{model or ''} ({', '.join(settings_sent)})" if settings_sent else model or ""
