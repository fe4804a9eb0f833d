"""Fit the judge prompt to the judge model's context window (docs/rendering.md, "Fitting
the context window").

The window is litellm's figure for the model, else SCORING_LLM_CONTEXT_TOKENS, lowered to
what a provider's context-length error said (``learn_window``). A prompt that does not fit
with room for the replies is shortened deterministically: long tool results and long texts
of the agent's conversation (``parts.Cuttable``) are cut, the middle of the longest first,
each keeping its beginning and end and a marker saying what was left out. A tool result's
text that an agent text holds verbatim is cut the same way in both. Everything else (the
alert, the tool lists, every tool call with its arguments, every error, the final analysis)
is kept whole; if that alone does not fit, nothing is sent (``InputTooLarge``).

Tokens are the judge model's (``tokens.count``). Counting megabytes takes seconds, so a text
over ``EXACT_COUNT_MAX_CHARS`` is estimated from evenly spread slices of it, with a margin;
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

from scoring.judge import llm, sampling, tokens
from scoring.judge.errors import InputTooLarge
from scoring.judge.parts import Cuttable, ToolResult
from scoring.judge.prompts import (
    EVALUATION_FOLLOWUP_PROMPT,
    RESTATE_SCORE_PROMPT,
    SHIPPED_CRITERIA,
    Criteria,
)

# A restated score, and each chat message's own framing tokens (six at most in turn 2).
RESTATED_REPLY_TOKENS = 16
# A turn-1 reply without an evaluation (a score line, at most a breakdown), which stays in the
# conversation when the judge is asked for the evaluation (conversation._ask_for_evaluation).
UNEVALUATED_REPLY_TOKENS = 256
MESSAGE_FRAMING_TOKENS = 8  # of one message
MESSAGE_OVERHEAD_TOKENS = 6 * MESSAGE_FRAMING_TOKENS  # (a system prompt adds a seventh message)
# A cut text keeps at least this many characters: half from its beginning, half from its end.
KEEP_MIN_CHARS = 2_000
# Where even that does not fit (a small window, a session of many long texts), the least kept
# is this instead, and texts longer than it are cut too: a glimpse of each beats no scoring.
KEEP_LEAST_CHARS = 400
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
    re.compile(r"exceeds the available context size \((\d+) tokens\)", re.IGNORECASE),  # llama.cpp's server
)


# --- The window -----------------------------------------------------------------------------


def context_window() -> int:
    """The judge model's context window in tokens: litellm's model list where it knows the
    model, else SCORING_LLM_CONTEXT_TOKENS; never more than a context-length error taught."""
    return context_window_and_source()[0]


def context_window_and_source() -> tuple[int, str]:
    """``context_window``, and where the figure came from (said by the worker as it starts)."""
    model = sampling.judge_model()
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
        _learned_windows[sampling.judge_model()] = window
    return window


def forget_learned_windows() -> None:
    with _learned_lock:
        _learned_windows.clear()


def prompt_room(window: int, criteria: Criteria = SHIPPED_CRITERIA) -> int:
    """Tokens the turn-1 prompt may take in ``window`` under ``criteria``: turn 2 resends it
    (after the criteria's system prompt, if any) with turn 1's reply and the follow-up (and,
    where turn 1 was asked for its evaluation, the reply without one and that request), and
    the window must still hold turn 2's reply."""
    return window - (
        2 * sampling.REPLY_MAX_TOKENS
        + _follow_up_tokens(sampling.judge_model(), criteria.followup_prompt, criteria.system_prompt)
        + RESTATED_REPLY_TOKENS
        + UNEVALUATED_REPLY_TOKENS
        + MESSAGE_OVERHEAD_TOKENS
        + (MESSAGE_FRAMING_TOKENS if criteria.system_prompt else 0)
    )


@cache
def _follow_up_tokens(model: str, followup_prompt: str, system_prompt: str) -> int:
    """The tokens of the criteria's follow-up and system prompts and of the restate and
    evaluation requests for ``model`` (``tokens.count`` counts for the judge model),
    counted once per process and criteria rather than per scoring."""
    return sum(
        tokens.count(prompt)
        for prompt in (followup_prompt, system_prompt, RESTATE_SCORE_PROMPT, EVALUATION_FOLLOWUP_PROMPT)
        if prompt
    )


# --- Counting -------------------------------------------------------------------------------


def prompt_tokens(text: str) -> int:
    """``text``'s tokens for the judge model: counted, or estimated from a sample with a margin."""
    if len(text) <= EXACT_COUNT_MAX_CHARS:
        return tokens.count(text)
    return _estimated(text)


def _tokens_within(text: str, room: int) -> int:
    """``text``'s tokens counted, or, when its UTF-8 bytes alone show that it fits ``room``,
    that bound without counting (most prompts: counting a 30 KB prompt costs the worker a
    millisecond or two). A token of the byte-level tokenizers that models use stands for at
    least one byte; ``TOKENIZER_SPECIAL_TOKENS`` covers those they add."""
    bound = len(text.encode("utf-8", "surrogatepass")) + TOKENIZER_SPECIAL_TOKENS
    return bound if bound <= room else tokens.count(text)


def _estimated(text: str) -> int:
    return int(len(text) * _density(text) * (1 + ESTIMATE_MARGIN)) + 1


def _density(text: str) -> float:
    """Tokens per character of ``text``, from ``ESTIMATE_SLICES`` slices spread evenly over it."""
    if len(text) <= ESTIMATE_SLICES * ESTIMATE_SLICE_CHARS:
        return tokens.count(text) / max(1, len(text))
    step = (len(text) - ESTIMATE_SLICE_CHARS) // (ESTIMATE_SLICES - 1)
    sample = "".join(text[i * step : i * step + ESTIMATE_SLICE_CHARS] for i in range(ESTIMATE_SLICES))
    return tokens.count(sample) / len(sample)


# --- Shortening -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    label: str  # what was cut: "kubernetes-server.get_logs output", "Agent Response (Stage 2)"
    text_bytes: int
    omitted_bytes: int
    tool_output: bool  # a tool's result (wherever it was shown), else a text of the agent's
    places: int = 1  # where the prompt shows it: a tool result an agent's text repeats, twice or more


@dataclass(frozen=True)
class FittedPrompt:
    prompt: str
    # Counted; or at most, when its bytes show it fits; or estimated with a margin for a
    # prompt over EXACT_COUNT_MAX_CHARS.
    tokens: int
    window: int
    coverage: float  # the share of the investigation's characters the prompt holds, 0..1
    cuts: tuple[Cut, ...] = ()  # in the order the prompt first shows them

    @property
    def warning(self) -> str | None:
        """What was cut, for the score's warnings; None when nothing was."""
        if not self.cuts:
            return None
        largest = sorted(self.cuts, key=lambda cut: (-cut.omitted_bytes * cut.places, cut.label))
        listed = ", ".join(
            f"{cut.label} ({_size(cut.omitted_bytes)} of {_size(cut.text_bytes)}"
            f"{f', in {cut.places} places' if cut.places > 1 else ''})"
            for cut in largest[:WARNING_LISTED_CUTS]
        )
        more = f" and {len(largest) - WARNING_LISTED_CUTS} more" if len(largest) > WARNING_LISTED_CUTS else ""
        results = sum(cut.tool_output for cut in self.cuts)
        texts = len(self.cuts) - results
        what = " and ".join(
            f"{n} {noun}{'s' if n != 1 else ''}"
            for n, noun in ((results, "tool result"), (texts, "agent text"))
            if n
        )
        return (
            f"{WARNING_PREFIX}the judge saw {coverage_percent(self.coverage)} of the investigation: the middle of "
            f"{what} was left out to fit the judge model's context window of {self.window:,} tokens: "
            f"{listed}{more}"
        )


def coverage_percent(coverage: float) -> str:
    """A coverage as people read it: "31%", "4.6%" (a decimal under 10%, so that it never reads 0%)."""
    return f"{coverage:.{0 if coverage >= 0.1 else 1}%}"


def is_fitting_warning(warning: str) -> bool:
    return warning.startswith(WARNING_PREFIX)


def fit_prompt(
    parts: list[str], build: Callable[[str], str], window: int, criteria: Criteria = SHIPPED_CRITERIA
) -> FittedPrompt:
    """The prompt ``build`` makes of the investigation's ``parts`` (joined with newlines),
    with its ``Cuttable`` parts shortened as far as needed for it to fit ``window`` beside
    the replies and the rest of ``criteria`` (``prompt_room``).

    Each long text keeps at least ``KEEP_MIN_CHARS``, or where that cannot fit, at least
    ``KEEP_LEAST_CHARS`` (and texts longer than that are cut too). Raises InputTooLarge when
    the whole prompt is over SCORING_MAX_INPUT_TOKENS (a bound on the work of one scoring,
    checked first), or when even that least does not fit.
    """
    tokens.save_learned()  # what the judge's last answers taught, for every process
    room = prompt_room(window, criteria)
    investigation = "\n".join(parts)
    frame = build("")
    llm.check_input_size(len(frame) + len(investigation))
    if len(investigation) <= EXACT_COUNT_MAX_CHARS:
        prompt = build(investigation)
        counted = _tokens_within(prompt, room)
    else:  # estimated without building a prompt of megabytes that may not be sent
        prompt = None
        counted = tokens.count(frame) + _estimated(investigation)
    if counted <= room:
        return FittedPrompt(prompt or build(investigation), counted, window, 1.0)
    for floor in (KEEP_MIN_CHARS, KEEP_LEAST_CHARS):
        layout = _Layout(parts, floor)
        least = layout.shortened({i: floor for i in range(len(layout.texts))}, build, window)
        if least.tokens <= room:
            break
    else:
        raise InputTooLarge(
            f"the judge prompt of this session is about {least.tokens:,} tokens even with every tool "
            f"result and agent text over {floor:,} characters cut to its first and last {floor // 2:,}, over "
            f"the {room:,} tokens that the judge model's context window of {window:,} leaves beside the "
            "replies: nothing was sent to the judge"
        )
    if not layout.texts:  # nothing to cut: the whole prompt fits after all (its estimate was high)
        return least
    extras = [len(text.text) - floor for text in layout.texts]
    places = [text.places for text in layout.texts]
    density = _density("".join(text.text for text in layout.texts))
    # Characters the long texts may keep beyond the least, aimed a little under the room
    # so that the first pass usually fits (each pass is a count of up to the whole window).
    budget = (room - least.tokens) * (1 - AIM_UNDER) / density
    for _ in range(MAX_FIT_PASSES):
        level = _water_level(extras, places, budget)
        keep = {i: floor + min(extra, level) for i, extra in enumerate(extras)}
        candidate = layout.shortened(keep, build, window)
        if candidate.tokens <= room:
            return candidate
        budget -= (candidate.tokens - room) / density * 1.1 + LINE_SNAP_CHARS * sum(places)
        if budget <= 0:
            break
    return least


def _water_level(extras: list[int], places: list[int], budget: float) -> float:
    """The most characters each text may keep beyond the least so that together, each as
    often as the prompt shows it, they keep at most ``budget``: the longest are cut first,
    the short ones keep everything."""
    remaining = budget
    ordered = sorted(zip(extras, places))
    sharing = sum(places)
    for extra, shown in ordered:
        if extra * sharing > remaining:
            return max(0.0, remaining / sharing)
        remaining -= extra * shown
        sharing -= shown
    return float(ordered[-1][0]) if ordered else 0.0


@dataclass
class _LongText:
    """A text that fitting may cut, once however often the prompt shows it."""

    text: str
    label: str
    tool_output: bool
    places: int = 0  # how often the prompt shows it


class _Layout:
    """The investigation's parts with their long texts found: each ``Cuttable`` part is a
    sequence of pieces, kept text or the index of a long text in ``texts``. An agent text
    that holds a long tool result verbatim has that result as a piece of its own, so that
    both are cut alike."""

    def __init__(self, parts: list[str], floor: int):
        self.parts = parts
        self.floor = floor  # a text longer than this is long: it may be cut
        self.texts: list[_LongText] = []
        self._index: dict[str, int] = {}
        self.pieces: dict[int, list[str | int]] = {}
        self._results = {str(p): p.label for p in parts if isinstance(p, ToolResult) and len(p) > floor}
        # Longest first: where one result holds another, the longer is the one repeated.
        embeddable = sorted(self._results, key=lambda text: (-len(text), text))
        for position, part in enumerate(parts):
            if not isinstance(part, Cuttable) or len(part) <= floor:
                continue
            if isinstance(part, ToolResult):
                pieces: list[str | int] = [self._long(part, part.label)]
            else:
                pieces = self._split(part, embeddable)
            for piece in pieces:
                if isinstance(piece, int):
                    self.texts[piece].places += 1
            self.pieces[position] = pieces
        self._total = sum(map(len, parts)) + len(parts) - 1

    def _long(self, text: str, label: str) -> int:
        """The index of ``text`` in ``texts``, in the order the prompt first shows them; a
        tool result is named as one wherever it is."""
        text = str(text)
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.texts)
            result_label = self._results.get(text)
            self.texts.append(_LongText(text, result_label or label, result_label is not None))
        return index

    def _split(self, part: Cuttable, embeddable: list[str]) -> list[str | int]:
        """``part`` as pieces: each long tool result it holds, and the text between them (a
        long text of its own when longer than the floor)."""
        spans: list[tuple[int, int]] = []
        for result in embeddable:
            if len(result) > len(part):
                continue
            start = part.find(result)
            while start >= 0:
                end = start + len(result)
                if not any(start < taken_end and taken_start < end for taken_start, taken_end in spans):
                    spans.append((start, end))
                start = part.find(result, end)
        pieces: list[str | int] = []
        at = 0
        for start, end in sorted(spans):
            pieces.extend(self._between(part, at, start))
            pieces.append(self._long(part[start:end], part.label))
            at = end
        pieces.extend(self._between(part, at, len(part)))
        return pieces

    def _between(self, part: Cuttable, start: int, end: int) -> list[str | int]:
        text = part[start:end]
        if len(text) > self.floor:
            return [self._long(text, part.label)]
        return [text] if text else []

    def shortened(self, keep: dict[int, float], build: Callable[[str], str], window: int) -> FittedPrompt:
        """The prompt with each long text ``texts[i]`` cut to ``keep[i]`` characters (when
        shorter), the same way wherever it is shown."""
        cut_texts: dict[int, str] = {}
        cuts = []
        omitted_chars = 0
        for index, text in enumerate(self.texts):
            kept = keep.get(index, len(text.text))
            if kept >= len(text.text):
                continue
            head_end, tail_start = _edges(text.text, int(kept))
            middle = text.text[head_end:tail_start]
            head, tail = text.text[:head_end], text.text[tail_start:]
            omitted = _bytes(middle)
            cuts.append(Cut(text.label, _bytes(head) + omitted + _bytes(tail), omitted, text.tool_output, text.places))
            cut_texts[index] = _with_omission(head, omitted, text.label, tail)
            omitted_chars += len(middle) * text.places
        cut_parts = list(self.parts)
        for position, pieces in self.pieces.items():
            if any(isinstance(piece, int) and piece in cut_texts for piece in pieces):
                cut_parts[position] = "".join(
                    cut_texts.get(piece, self.texts[piece].text) if isinstance(piece, int) else piece
                    for piece in pieces
                )
        prompt = build("\n".join(cut_parts))
        coverage = round(1 - omitted_chars / self._total, 4) if self._total else 1.0
        return FittedPrompt(prompt, prompt_tokens(prompt), window, coverage, tuple(cuts))


def excerpt(text: str, kept: int, label: str) -> str:
    """``text`` cut to its first and last ``kept`` characters or so (lines kept whole where a
    break is near) with the marker saying what was left out, as fitting cuts a long text;
    ``text`` itself when it is no longer."""
    if len(text) <= kept:
        return text
    head_end, tail_start = _edges(text, kept)
    omitted = _bytes(text[head_end:tail_start])
    return _with_omission(text[:head_end], omitted, label, text[tail_start:])


def _with_omission(head: str, omitted_bytes: int, label: str, tail: str) -> str:
    return f"{head}\n[… {_size(omitted_bytes)} of {label} omitted …]\n{tail}"


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
