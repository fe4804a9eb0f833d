"""Tokens of a text as the judge model counts them (docs/rendering.md, "Counting").

The first way that holds for the judge model (``sampling.judge_model``):

1. **The provider's tokenizer.** An OpenAI-compatible server at SCORING_LLM_API_BASE that
   answers ``POST /tokenize`` at its root, as llama.cpp's server (``{"content"}`` ->
   ``{"tokens"}``) and vLLM (``{"model", "prompt"}`` -> ``{"count"}``) do. Whether it does is
   asked once per process (again after ``PROBE_AGAIN_S`` when it did not answer).
2. **litellm's tokenizer for the model**, where it has the model's own: OpenAI's models
   (tiktoken) and those it counts with a Hugging Face tokenizer it could load (Llama 2 and 3,
   Command R).
3. **litellm's default count times the ratio learned for the model.** litellm counts a model
   it does not know as OpenAI's tokenizer does, which can fall well short (a Qwen model
   counts log lines a fifth higher). Each answer's ``usage.prompt_tokens`` over our count of
   what was sent (``observe``) is a ratio; the largest seen, never below 1, multiplies every
   count. It is kept in the ``judge_token_ratio`` table, so that every worker process, on
   every host, fits prompts with it.

litellm is imported on first use only (``scoring.judge.llm``).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.db import IntegrityError, transaction

from scoring.judge import sampling
from scoring.models import JudgeTokenRatio

logger = logging.getLogger(__name__)

# How long a process keeps a provider's "no /tokenize here" (or no answer) before asking again.
PROBE_AGAIN_S = 60.0
# The longest a /tokenize request may take: counting is local work for the server.
TOKENIZE_TIMEOUT_S = 10.0
PROBE_TEXT = "2025-06-01T00:00:00Z level=info probe"
# An answer teaches a ratio only from a prompt this long by our count: a short one's ratio is
# mostly the chat template's framing, which the replies' room covers.
LEARN_MIN_TOKENS = 2_000
# A larger ratio is no tokenizer's difference: the provider counted something else (kept at this).
MAX_RATIO = 4.0
# A ratio within this share above the one known is the chat template's framing, not news.
RATIO_NOISE = 0.01
# A process re-reads the ratio other processes learned at most this often.
RATIO_READ_S = 30.0
# Tokens litellm adds for each chat message (OpenAI's framing and the role), and to prime the reply.
MESSAGE_FRAMING_TOKENS = 4
REPLY_PRIMING_TOKENS = 3

# litellm's own count for these providers' models is their tokenizer's (tiktoken).
_TIKTOKEN_PROVIDERS = frozenset({"openai", "azure", "text-completion-openai"})
# The Hugging Face tokenizers litellm counts with that are the models' own (its "anthropic"
# one is Claude 2's, which it also uses for later Claude models named without a provider).
_OWN_HUGGING_FACE_TOKENIZERS = frozenset({"llama2", "llama3", "cohere"})


@dataclass(frozen=True)
class _Provider:
    url: str  # POST here
    style: str  # "llama.cpp" or "vllm"
    model: str  # the name the server knows the model by


# (model, api base) -> (the provider's tokenizer or None, time.monotonic() when asked)
_probed: dict[tuple[str, str], tuple[_Provider | None, float]] = {}
_probe_lock = threading.Lock()
# model -> (ratio, time.monotonic() when read from the table)
_ratios: dict[str, tuple[float, float]] = {}
# model -> (ratio, provider tokens, our tokens) learned by this process and not yet saved
_unsaved: dict[str, tuple[float, int, int]] = {}
_ratio_lock = threading.Lock()


def count(text: str) -> int:
    """``text``'s tokens for the judge model, by the first way that holds (module docstring)."""
    provider = _provider()
    if provider is not None:
        counted = _tokenize(provider, text)
        if counted is not None:
            return counted
    raw = litellm_count(text)
    if litellm_knows_tokenizer(sampling.judge_model()):
        return raw
    return math.ceil(raw * ratio())


def litellm_count(text: str) -> int:
    """``text``'s tokens by litellm's counter for the judge model (offline: its bundled
    tokenizers; a model it does not know is counted as OpenAI's are)."""
    return _litellm_count(sampling.judge_model(), text)


@lru_cache(maxsize=8)
def _litellm_count(model: str, text: str) -> int:
    """Kept for the last few texts: the prompt that fitting counted is counted again by
    ``observe`` when it is answered, and resent in the conversation's later turns."""
    import litellm

    return litellm.token_counter(model=model, text=text)


def method() -> str:
    """How ``count`` counts for the judge model now, as people read it."""
    provider = _provider()
    if provider is not None:
        return _method_of(provider)
    if litellm_knows_tokenizer(sampling.judge_model()):
        return "litellm's tokenizer for the model"
    return f"litellm's default tokenizer times the ratio learned from the provider's answers ({ratio():.3f})"


# --- 1. The provider's tokenizer -------------------------------------------------------------


def _provider() -> _Provider | None:
    base = settings.SCORING_LLM_API_BASE
    if not base:
        return None
    key = (sampling.judge_model(), base)
    known = _probed.get(key)
    if known is not None and (known[0] is not None or time.monotonic() - known[1] < PROBE_AGAIN_S):
        return known[0]
    with _probe_lock:
        known = _probed.get(key)
        if known is None or (known[0] is None and time.monotonic() - known[1] >= PROBE_AGAIN_S):
            known = (_probe(*key), time.monotonic())
            _probed[key] = known
    return known[0]


def _probe(model: str, base: str) -> _Provider | None:
    """The server's /tokenize, if it answers one of the two shapes (llama.cpp's first: given
    vLLM's body it answers an empty list)."""
    url = re.sub(r"/v1/?$", "", base.rstrip("/")) + "/tokenize"
    served = model.split("/", 1)[-1]
    for style in ("llama.cpp", "vllm"):
        provider = _Provider(url, style, served)
        if _tokenize(provider, PROBE_TEXT, probing=True):
            logger.info("the judge model's tokens are counted by %s", _method_of(provider))
            return provider
    logger.info(
        "the judge LLM server at %s counts no tokens for us (POST %s); counting with litellm", base, url
    )
    return None


def _method_of(provider: _Provider) -> str:
    return f"the provider's own tokenizer ({provider.style} POST {provider.url})"


def _tokenize(provider: _Provider, text: str, probing: bool = False) -> int | None:
    """The server's count of ``text``; None when it gives none (then the process asks again
    after PROBE_AGAIN_S whether it counts, and counts with litellm meanwhile)."""
    import httpx

    if provider.style == "llama.cpp":
        body = {"content": text}
    else:
        body = {"model": provider.model, "prompt": text}
    headers = {"Authorization": f"Bearer {settings.SCORING_LLM_API_KEY}"} if settings.SCORING_LLM_API_KEY else {}
    try:
        response = httpx.post(provider.url, json=body, headers=headers, timeout=TOKENIZE_TIMEOUT_S)
        answer = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        answer = None
        if not probing:
            logger.warning("the judge LLM server's %s failed (%s); counting with litellm", provider.url, exc)
    counted = None
    if isinstance(answer, dict):
        if provider.style == "llama.cpp" and isinstance(answer.get("tokens"), list) and "count" not in answer:
            counted = len(answer["tokens"])
        elif provider.style == "vllm" and isinstance(answer.get("count"), int):
            counted = answer["count"]
    if probing:
        return counted or None  # a server that counts nothing in the probe does not count
    if counted is None:
        _probed[(sampling.judge_model(), settings.SCORING_LLM_API_BASE)] = (None, time.monotonic())
    return counted


# --- 2. litellm's tokenizer for the model ----------------------------------------------------


_known_tokenizers: dict[str, bool] = {}


def litellm_knows_tokenizer(model: str) -> bool:
    """Whether litellm counts ``model`` with the model's own tokenizer: a model of OpenAI's that
    it lists, or one it counts with a Hugging Face tokenizer that it could load (offline, one
    it does not have falls back to OpenAI's). Looked up once per process."""
    known = _known_tokenizers.get(model)
    if known is None:
        import litellm
        from litellm.utils import huggingface_tokenizer_kind, select_tokenizer

        try:
            provider = litellm.get_model_info(model).get("litellm_provider")
        except Exception:  # noqa: BLE001 - litellm raises several kinds for a model it does not list
            provider = None
        known = provider in _TIKTOKEN_PROVIDERS or (
            huggingface_tokenizer_kind(model) in _OWN_HUGGING_FACE_TOKENIZERS
            and select_tokenizer(model)["type"] == "huggingface_tokenizer"
        )
        _known_tokenizers[model] = known
    return known


# --- 3. The learned ratio --------------------------------------------------------------------


def ratio() -> float:
    """The ratio learned for the judge model: 1 until an answer teaches a larger one.
    Saves what this process learned, and reads what others did at most every RATIO_READ_S."""
    model = sampling.judge_model()
    saved = save_learned()
    known = _ratios.get(model)
    if not saved and known is not None and time.monotonic() - known[1] < RATIO_READ_S:
        return known[0]
    stored = JudgeTokenRatio.objects.filter(model=model).values_list("ratio", flat=True).first()
    with _ratio_lock:
        # What a sample's answer taught meanwhile counts too.
        value = max(1.0, stored or 1.0, _ratios.get(model, (1.0, 0.0))[0])
        _ratios[model] = (value, time.monotonic())
    return value


def save_learned() -> bool:
    """Save the ratio this process learned for the judge model and has not saved yet
    (``observe`` cannot: it may run in a thread that holds no database connection). Whether
    there was one."""
    model = sampling.judge_model()
    with _ratio_lock:
        unsaved = _unsaved.pop(model, None)
    if unsaved is None:
        return False
    _save(model, *unsaved)
    return True


def observe(model: str, messages: list[dict], provider_tokens: int | None) -> None:
    """Learn from an answer to ``messages`` whose ``usage.prompt_tokens`` was ``provider_tokens``:
    where ``count`` uses the ratio, a ratio larger than the one known is used by this process
    at once, and saved to the table by ``save_learned`` (each fitting starts with it)."""
    if not provider_tokens or model != sampling.judge_model() or litellm_knows_tokenizer(model):
        return
    if _provider() is not None:
        return
    ours = REPLY_PRIMING_TOKENS + sum(
        _litellm_count(model, _text_of(message)) + MESSAGE_FRAMING_TOKENS for message in messages
    )
    if ours < LEARN_MIN_TOKENS:
        return
    seen = min(MAX_RATIO, provider_tokens / ours)
    with _ratio_lock:
        known = _ratios.get(model, (1.0, 0.0))
        if seen <= known[0] * (1 + RATIO_NOISE):
            return
        _ratios[model] = (seen, known[1])
        _unsaved[model] = (seen, provider_tokens, ours)
    logger.info(
        "%s counted %s prompt tokens where litellm counts %s: its counts are taken as %.3f times litellm's",
        model,
        provider_tokens,
        ours,
        seen,
    )


def _text_of(message: dict) -> str:
    """A message's text, also where it is text blocks (a cache breakpoint's)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))
    return content if isinstance(content, str) else ""


def _save(model: str, value: float, provider_tokens: int, ours: int) -> None:
    """Keep ``value`` as ``model``'s ratio where it is larger than the stored one (one
    conditional statement: concurrent processes never lower it)."""
    fields = {
        "ratio": value,
        "provider_tokens": provider_tokens,
        "counted_tokens": ours,
        "learned_at_us": time.time_ns() // 1_000,
    }
    if JudgeTokenRatio.objects.filter(model=model, ratio__lt=value).update(**fields):
        return
    try:
        with transaction.atomic():
            JudgeTokenRatio.objects.create(model=model, **fields)
    except IntegrityError:  # stored meanwhile, or already as large
        JudgeTokenRatio.objects.filter(model=model, ratio__lt=value).update(**fields)


def forget() -> None:
    """Forget what this process knows (for tests: the table is another matter)."""
    with _probe_lock:
        _probed.clear()
    with _ratio_lock:
        _ratios.clear()
        _unsaved.clear()
    _known_tokenizers.clear()
