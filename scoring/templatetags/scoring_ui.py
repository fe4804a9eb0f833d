"""Score badges, Markdown and times for the dashboard and admin templates.

A badge always says in words what its colour says (colour is never the only
signal). The same catalogue is handed to the page's script (``badge_catalog``)
so that badges updated live look exactly like the server's.
"""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from scoring import failures
from scoring.criteria.selectors import is_current_anywhere
from scoring.judge import fitting
from scoring.judge.prompts import EVALUATION_FOLLOWUP_PROMPT, RESTATE_SCORE_PROMPT
from scoring.judge.replies import BREAKDOWN_WARNING_PREFIX, DIMENSION_LABELS, DIMENSIONS, is_breakdown_warning
from scoring.judge.sampling import judge_label
from scoring.markdown import render_markdown
from scoring.models import ScoringStatus
from scoring.selectors import SCORE_BANDS, band_of, scoring_input_tokens

register = template.Library()


@dataclass(frozen=True)
class Badge:
    css: str
    text: str
    title: str


NOT_SCORED = Badge("badge-none", "Not scored", "This session has not been scored")
SCORING = Badge("badge-scoring", "Scoring…", "The judge is scoring this session")
# Not just "Failed": a session's TARSy status can be "Failed" too, beside it.
FAILED = Badge("badge-failed", "Scoring failed", "The last scoring failed")
# A failed badge's hover text with the reason, of which it shows up to REASON_CHARS characters.
FAILED_WITH_REASON = "Scoring failed: {reason}"
REASON_CHARS = 300
NO_REASON = "no reason was recorded"


@register.filter
def failure_reason(error_message: str | None) -> str:
    """A failed score's reason as the pages show it (the page script: ``reasonShown``): in the
    service's words, never the provider's (scoring/failures.py); the admin shows the record."""
    shown = failures.shown_reason(error_message)
    return Truncator(shown).chars(REASON_CHARS) if shown else NO_REASON


@register.filter
def report_failure_reason(error_message: str | None) -> str:
    """A failed MCP report's reason as the insights page shows it (as ``failure_reason``)."""
    return failures.shown_reason(error_message, report=True) or NO_REASON


def badge(
    status: str | None, total_score: int | None, error_message: str | None = None, as_recorded: bool = False
) -> Badge:
    """The badge for a session's newest score (no ``status``: never scored); a failed
    one's hover text gives the reason (``failure_reason``), or with ``as_recorded`` (the
    admin: staff) the start of ``error_message`` itself.

    Templates pass "" for a missing score's fields, so any empty status counts.
    """
    if not status:
        return NOT_SCORED
    if status in ScoringStatus.active_values():
        return SCORING
    if status == ScoringStatus.FAILED:
        if not error_message:
            return FAILED
        recorded = Truncator(error_message).chars(REASON_CHARS)
        reason = recorded if as_recorded else failure_reason(error_message)
        return Badge(FAILED.css, FAILED.text, FAILED_WITH_REASON.format(reason=reason))
    band = band_of(total_score)
    return Badge(
        f"badge-{band.key}",
        f"{total_score} · {band.label}",
        f"Score {total_score}/100: {band.meaning} ({band.low}-{band.high})",
    )


def badge_html(
    status: str | None, total_score: int | None, error_message: str | None = None, as_recorded: bool = False
) -> SafeString:
    shown = badge(status, total_score, error_message, as_recorded)
    return format_html('<span class="badge {}" title="{}">{}</span>', shown.css, shown.title, shown.text)


def badge_catalog() -> dict:
    """Badges and bands for the page script (rendered with ``json_script``)."""
    return {
        "not_scored": asdict(NOT_SCORED),
        "scoring": asdict(SCORING),
        "failed": asdict(FAILED),
        "failed_with_reason": FAILED_WITH_REASON,
        "reason_chars": REASON_CHARS,
        "no_reason": NO_REASON,
        "bands": [asdict(band) for band in SCORE_BANDS],
    }


@register.simple_tag
def score_badge(status, total_score, error_message=None) -> SafeString:
    return badge_html(status, total_score, error_message)


@register.filter
def scoring_tokens(prompt_chars) -> int:
    """Estimated judge input tokens of one scoring of a session whose score prompt has
    ``prompt_chars`` characters (``selectors.with_scoring_estimate``)."""
    return scoring_input_tokens(prompt_chars)


@register.filter
def markdown(text) -> SafeString:
    return render_markdown(text)


@register.filter
def utc_datetime(moment: datetime | None) -> str:
    """An aware datetime as 'YYYY-MM-DD HH:MM:SS UTC' ('' for None): every time shown has this form."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@register.filter
def us_datetime(timestamp_us) -> str:
    """Microseconds since the epoch as 'YYYY-MM-DD HH:MM:SS UTC' ('' for None)."""
    if timestamp_us is None:
        return ""
    return utc_datetime(datetime.fromtimestamp(timestamp_us / 1_000_000, tz=UTC))


@register.simple_tag
def duration(start_us, end_us) -> str:
    """How long from ``start_us`` to ``end_us``, e.g. '1 min 5 s' ('' if unfinished)."""
    if start_us is None or end_us is None:
        return ""
    seconds = max(0, round((end_us - start_us) / 1_000_000))
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


@register.filter
def band_meaning(total_score) -> str:
    band = band_of(total_score)
    return band.meaning if band else ""


@register.filter
def criteria_label(prompt_hash) -> str:
    """"current" when ``prompt_hash`` is the current criteria of some scope, else "obsolete": for
    figures grouped by hash, which belong to no one session (a score or session row has its own
    ``criteria_current``, from ``criteria.selectors.with_criteria_current``)."""
    return "current" if is_current_anywhere(prompt_hash) else "obsolete"


@register.filter
def dimension_rows(dimensions: dict | None) -> list[tuple[str, int | None]]:
    """A score's criteria breakdown as (criterion, points or None) in the prompt's order;
    empty when the judge gave none."""
    if not dimensions:
        return []
    return [(DIMENSION_LABELS[key], dimensions.get(key)) for key in DIMENSIONS]


@register.filter
def breakdown_warnings(warnings: list[str] | None) -> list[str]:
    """The warnings about the criteria breakdown, without their prefix; not the injection findings."""
    return [warning.removeprefix(BREAKDOWN_WARNING_PREFIX) for warning in warnings or [] if is_breakdown_warning(warning)]


@register.filter
def fitting_warnings(warnings: list[str] | None) -> list[str]:
    """The warnings naming what was cut to fit the judge's context window, without their prefix."""
    return [
        warning.removeprefix(fitting.WARNING_PREFIX) for warning in warnings or [] if fitting.is_fitting_warning(warning)
    ]


@register.filter
def coverage_note(coverage: float | None) -> str:
    """How much of the investigation the judge saw, for the admin: "31% (cut to fit)"; "" when unknown."""
    if coverage is None:
        return ""
    return "all" if coverage >= 1 else f"{fitting.coverage_percent(coverage)} (cut to fit the window)"


@register.filter
def samples_note(score) -> str:
    """A score's judge samples, for the score panel and the admin: "unstable: samples 62,
    70, 85 (spread 23)"; "" for a score made from one sample."""
    if not score.score_samples:
        return ""
    samples = ", ".join("failed" if sample is None else str(sample) for sample in score.score_samples)
    spread = f" (spread {score.score_spread})" if score.score_spread is not None else ""
    return f"{'unstable: ' if score.unstable else ''}samples {samples}{spread}"


@register.filter
def judge_name(score) -> str:
    """The judge that made a score: its model, and the sampling settings its calls sent."""
    return judge_label(score.judge_model, score.judge_temperature, score.judge_seed)


@register.filter
def group_judge(group: dict) -> str:
    """The judge of an agreement group (its ``judge_model``, ``judge_temperature`` and ``judge_seed``)."""
    return judge_label(group.get("judge_model"), group.get("judge_temperature"), group.get("judge_seed"))


# What the service's own requests within a turn are, for a transcript's readers; any other
# prompt after turn 1 is the criteria's follow-up (turn 2), whichever criteria judged.
_SERVICE_REQUESTS = {
    RESTATE_SCORE_PROMPT: "The service asks the judge to restate its score",
    EVALUATION_FOLLOWUP_PROMPT: "The service asks the judge for the evaluation it left out",
}


@register.filter
def transcript_conversations(transcript: dict | None) -> list[dict]:
    """A stored transcript (``conversation.Transcript.as_json``) for reading: each conversation's
    messages with what each is (``label``), its text (the text of its blocks, for a prompt sent with
    a cache breakpoint) and length, and the conversation's error."""
    shown = []
    for conversation in (transcript or {}).get("conversations", []):
        messages = []
        prompts = 0  # the user messages so far
        for message in conversation.get("messages", []):
            content = message.get("content")
            text = content if isinstance(content, str) else "".join(
                block.get("text", "") for block in content or [] if isinstance(block, dict)
            )
            role = message.get("role")
            if role == "assistant":
                label = "The judge's reply"
            elif role == "system":
                label = "The criteria's system prompt"
            elif prompts == 0:
                label = "Turn 1: the score prompt, as sent after fitting"
            else:
                label = _SERVICE_REQUESTS.get(text, "Turn 2: the criteria's follow-up (missing tools)")
            prompts += role == "user"
            messages.append({"role": role, "label": label, "text": text, "chars": len(text)})
        shown.append({"messages": messages, "error": conversation.get("error")})
    return shown
