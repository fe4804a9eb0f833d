"""Fit the judge prompt to the judge model's context window (docs/rendering.md, "Fitting
the context window").

The window is litellm's figure for the model, else SCORING_LLM_CONTEXT_TOKENS, lowered to
what a provider's context-length error said (``learn_window``). A prompt that does not fit
with room for the replies is shortened deterministically: only long tool results are cut,
the middle of the longest first, each keeping its beginning and end and a marker saying
what was left out. Everything else (the alert, every agent message, every tool call with
its arguments, every error, the final analysis) is kept whole; if that alone does not
fit, nothing is sent (``InputTooLarge``).

Counting the tokens of megabytes with litellm's counter takes seconds, so a text over
``EXACT_COUNT_MAX_CHARS`` is estimated from evenly spread slices of it, with a margin;
shorter texts (every prompt fitted to a window of up to about 200k tokens) are counted
exactly, but for a prompt whose UTF-8 bytes alone show that it fits (a token stands for at
least one byte), which is not counted at all.
"""

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from django.conf import settings

from scoring.judge import llm
from scoring.judge.errors import InputTooLarge
from scoring.judge.prompts import JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS, RESTATE_SCORE_PROMPT
from scoring.judge.parts import ToolResult

# Room kept for each judge reply: turn 1's (resent in turn 2) and turn 2's.
REPLY_TOKENS = 4_096
# A restated score, and each chat message's own framing tokens (six at most in turn 2).
RESTATED_REPLY_TOKENS = 16
MESSAGE_OVERHEAD_TOKENS = 6 * 8
# A cut tool result keeps at least this many characters: half from its beginning, half from its end.
KEEP_MIN_CHARS = 2_000
# A cut edge moves back to a line break when one is this close, so that lines stay whole.
LINE_SNAP_CHARS = 256
# Tokens a tokenizer may add to a text's own (a beginning-of-text mark, a leading space).
TOKENIZER_SPECIAL_TOKENS = 16
# Texts up to this long are counted exactly (about 0.1 s); longer ones are estimated.
EXACT_COUNT_MAX_CHARS = 1_000_000
ESTIMATE_SLICES = 32
ESTIMATE_SLICE_CHARS = 2_048
ESTIMATE_MARGIN = 0.05
# The share of the room left unused by the first cut, for the estimate's error.
AIM_UNDER = 0.01
# Passes over the cut when a count finds the estimate was short.
MAX_FIT_PASSES = 4
# Of a context-length error that does not say the model's window, the share of the window
# tried that the next try aims at.
SHRINK_UNSTATED = 0.75
WARNING_PREFIX = "input shortened: "
WARNING_LISTED_CUTS = 5

_learned_windows: dict[str, int] = {}
_learned_lock = threading.Lock()

# How providers word a context-length error, each with the model's window in the first group:
# OpenAI (and OpenAI-compatible servers), Anthropic, Gemini.
_STATED_WINDOW = (
    re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE),
    re.compile(r"prompt is too long: \d+ tokens > (\d+) maximum", re.IGNORECASE),
    re.compile(r"maximum number of tokens allowed \((\d+)\)", re.IGNORECASE),
)


# --- The window -----------------------------------------------------------------------------


def context_window() -> int:
    """The judge model's context window in tokens: litellm's model list where it knows the
    model, else SCORING_LLM_CONTEXT_TOKENS; never more than a context-length error taught."""
    return context_window_and_source()[0]


def context_window_and_source() -> tuple[int, str]:
    """``context_window``, and where the figure came from (said by the worker as it starts)."""
    model = settings.SCORING_LLM_MODEL
    listed = llm.model_input_window()
    if listed:
        window, source = listed, "litellm's model list"
    else:
        window, source = settings.SCORING_LLM_CONTEXT_TOKENS, "SCORING_LLM_CONTEXT_TOKENS; litellm does not list the model"
    with _learned_lock:
        learned = _learned_windows.get(model)
    if learned and learned < window:
        return learned, "a context-length error of the provider's"
    return window, source


def learn_window(error_message: str, tried_window: int) -> int:
    """The window to try next after a context-length error on a prompt fitted to
    ``tried_window``: the provider's stated window when it is smaller, else a smaller share
    of the one tried (our count fell short of the provider's). Kept for this model in this
    process, so that later scorings start from it."""
    stated = next((int(m.group(1)) for p in _STATED_WINDOW if (m := p.search(error_message))), None)
    window = stated if stated is not None and stated < tried_window else int(tried_window * SHRINK_UNSTATED)
    with _learned_lock:
        _learned_windows[settings.SCORING_LLM_MODEL] = window
    return window


def forget_learned_windows() -> None:
    with _learned_lock:
        _learned_windows.clear()


def prompt_room(window: int) -> int:
    """Tokens the turn-1 prompt may take in ``window``: turn 2 resends it with turn 1's
    reply and the follow-up, and the window must still hold turn 2's reply."""
    return window - (
        2 * REPLY_TOKENS
        + _follow_up_tokens(settings.SCORING_LLM_MODEL)
        + RESTATED_REPLY_TOKENS
        + MESSAGE_OVERHEAD_TOKENS
    )


@cache
def _follow_up_tokens(model: str) -> int:
    """The tokens of the fixed follow-up and restate prompts for ``model`` (``count_tokens``
    counts for the configured model), counted once per process rather than per scoring."""
    return llm.count_tokens(JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS) + llm.count_tokens(RESTATE_SCORE_PROMPT)


# --- Counting -------------------------------------------------------------------------------


def prompt_tokens(text: str) -> int:
    """``text``'s tokens for the judge model: counted, or estimated from a sample with a margin."""
    if len(text) <= EXACT_COUNT_MAX_CHARS:
        return llm.count_tokens(text)
    return _estimated(text)


def _tokens_within(text: str, room: int) -> int:
    """``text``'s tokens counted, or, when its UTF-8 bytes alone show that it fits ``room``,
    that bound without counting (most prompts: counting a 30 KB prompt costs the worker a
    millisecond or two). A token of the byte-level tokenizers litellm counts with stands
    for at least one byte; ``TOKENIZER_SPECIAL_TOKENS`` covers those they add."""
    bound = len(text.encode("utf-8", "surrogatepass")) + TOKENIZER_SPECIAL_TOKENS
    return bound if bound <= room else llm.count_tokens(text)


def _estimated(text: str) -> int:
    return int(len(text) * _density(text) * (1 + ESTIMATE_MARGIN)) + 1


def _density(text: str) -> float:
    """Tokens per character of ``text``, from ``ESTIMATE_SLICES`` slices spread evenly over it."""
    if len(text) <= ESTIMATE_SLICES * ESTIMATE_SLICE_CHARS:
        return llm.count_tokens(text) / max(1, len(text))
    step = (len(text) - ESTIMATE_SLICE_CHARS) // (ESTIMATE_SLICES - 1)
    sample = "".join(text[i * step : i * step + ESTIMATE_SLICE_CHARS] for i in range(ESTIMATE_SLICES))
    return llm.count_tokens(sample) / len(sample)


# --- Shortening -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    tool: str
    result_bytes: int
    omitted_bytes: int


@dataclass(frozen=True)
class FittedPrompt:
    prompt: str
    # Counted; or at most, when its bytes show it fits; or estimated with a margin for a
    # prompt over EXACT_COUNT_MAX_CHARS.
    tokens: int
    window: int
    coverage: float  # the share of the investigation's characters the prompt holds, 0..1
    cuts: tuple[Cut, ...] = ()

    @property
    def warning(self) -> str | None:
        """What was cut, for the score's warnings; None when nothing was."""
        if not self.cuts:
            return None
        largest = sorted(self.cuts, key=lambda cut: (-cut.omitted_bytes, cut.tool))
        listed = ", ".join(
            f"{cut.tool} ({_size(cut.omitted_bytes)} of {_size(cut.result_bytes)})"
            for cut in largest[:WARNING_LISTED_CUTS]
        )
        more = f" and {len(largest) - WARNING_LISTED_CUTS} more" if len(largest) > WARNING_LISTED_CUTS else ""
        return (
            f"{WARNING_PREFIX}the judge saw {coverage_percent(self.coverage)} of the investigation: the middle of "
            f"{len(self.cuts)} tool result{'s' if len(self.cuts) != 1 else ''} was left out to fit the "
            f"judge model's context window of {self.window:,} tokens: {listed}{more}"
        )


def coverage_percent(coverage: float) -> str:
    """A coverage as people read it: "31%", "4.6%" (a decimal under 10%, so that it never reads 0%)."""
    return f"{coverage:.{0 if coverage >= 0.1 else 1}%}"


def is_fitting_warning(warning: str) -> bool:
    return warning.startswith(WARNING_PREFIX)


def fit_prompt(parts: list[str], build: Callable[[str], str], window: int) -> FittedPrompt:
    """The prompt ``build`` makes of the investigation's ``parts`` (joined with newlines),
    with tool results shortened as far as needed for it to fit ``window`` beside the replies.

    Raises InputTooLarge when the whole prompt is over SCORING_MAX_INPUT_TOKENS (a bound on
    the work of one scoring, checked first), or when even every long tool result cut to
    ``KEEP_MIN_CHARS`` does not fit.
    """
    room = prompt_room(window)
    investigation = "\n".join(parts)
    frame = build("")
    llm.check_input_size(len(frame) + len(investigation))
    if len(investigation) <= EXACT_COUNT_MAX_CHARS:
        prompt = build(investigation)
        tokens = _tokens_within(prompt, room)
    else:  # estimated without building a prompt of megabytes that may not be sent
        prompt = None
        tokens = llm.count_tokens(frame) + _estimated(investigation)
    if tokens <= room:
        return FittedPrompt(prompt or build(investigation), tokens, window, 1.0)
    long = [i for i, part in enumerate(parts) if isinstance(part, ToolResult) and len(part) > KEEP_MIN_CHARS]
    least = _shortened(parts, {i: KEEP_MIN_CHARS for i in long}, build, window)
    if least.tokens > room:
        raise InputTooLarge(
            f"the judge prompt of this session is about {least.tokens:,} tokens even with every long tool "
            f"result cut to its first and last {KEEP_MIN_CHARS // 2:,} characters, over the "
            f"{room:,} tokens that the judge model's context window of {window:,} leaves beside the "
            "replies: nothing was sent to the judge"
        )
    if not long:  # nothing to cut: the whole prompt fits after all (its estimate was high)
        return least
    extras = [len(parts[i]) - KEEP_MIN_CHARS for i in long]
    density = _density("".join(parts[i] for i in long))
    # Characters the long results may keep beyond the least, aimed a little under the room
    # so that the first pass usually fits (each pass is a count of up to the whole window).
    budget = (room - least.tokens) * (1 - AIM_UNDER) / density
    for _ in range(MAX_FIT_PASSES):
        level = _water_level(extras, budget)
        keep = {i: KEEP_MIN_CHARS + min(extra, level) for i, extra in zip(long, extras)}
        candidate = _shortened(parts, keep, build, window)
        if candidate.tokens <= room:
            return candidate
        budget -= (candidate.tokens - room) / density * 1.1 + LINE_SNAP_CHARS * len(long)
        if budget <= 0:
            break
    return least


def _water_level(extras: list[int], budget: float) -> float:
    """The most characters each result may keep beyond the least so that together they keep
    at most ``budget``: the longest are cut first, the short ones keep everything."""
    remaining = budget
    ordered = sorted(extras)
    for index, extra in enumerate(ordered):
        sharing = len(ordered) - index
        if extra * sharing > remaining:
            return max(0.0, remaining / sharing)
        remaining -= extra
    return float(ordered[-1]) if ordered else 0.0


def _shortened(
    parts: list[str], keep: dict[int, float], build: Callable[[str], str], window: int
) -> FittedPrompt:
    """The prompt with each result ``parts[i]`` cut to ``keep[i]`` characters (when shorter)."""
    cut_parts = list(parts)
    cuts = []
    total = sum(map(len, parts)) + len(parts) - 1
    omitted_chars = 0
    for index, kept in keep.items():
        result = parts[index]
        if kept >= len(result):
            continue
        head_end, tail_start = _edges(result, int(kept))
        middle = result[head_end:tail_start]
        head, tail = result[:head_end], result[tail_start:]
        omitted = _bytes(middle)
        cuts.append(Cut(result.tool, _bytes(head) + omitted + _bytes(tail), omitted))
        cut_parts[index] = f"{head}\n[… {_size(omitted)} of {result.tool} output omitted …]\n{tail}"
        omitted_chars += len(middle)
    prompt = build("\n".join(cut_parts))
    coverage = round(1 - omitted_chars / total, 4) if total else 1.0
    return FittedPrompt(prompt, prompt_tokens(prompt), window, coverage, tuple(cuts))


def _edges(text: str, kept: int) -> tuple[int, int]:
    """Where the kept beginning ends and the kept end starts, at line breaks when near."""
    head_end = kept // 2
    tail_start = len(text) - (kept - head_end)
    snapped = text.rfind("\n", head_end - LINE_SNAP_CHARS, head_end)
    head_end = snapped if snapped > 0 else head_end
    snapped = text.find("\n", tail_start, tail_start + LINE_SNAP_CHARS)
    tail_start = snapped + 1 if snapped >= 0 else tail_start
    return head_end, tail_start


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _size(size: int) -> str:
    if size < 1_000:
        return f"{size} bytes"
    if size < 1_000_000:
        return f"{size / 1_000:.1f} KB"
    return f"{size / 1_000_000:.1f} MB"
