"""What an alert is called and what it says, in one line, from a TARSy session.

TARSy keeps the alert exactly as its sender posted it (``alert_data``: tarsy-bot any JSON
object, Go TARSy a text, often JSON), so nothing here assumes a shape.
The real documents carry, for example, ``alert`` + ``message`` (our samples),
``description`` alone (tarsy-bot's own test alerts), or only identifying fields
(``namespace``, ``pod_name``); Alertmanager puts the name in
``labels.alertname`` and the text in ``annotations.summary`` / ``description``.
"""

import itertools
import json
from dataclasses import dataclass

# Keys compared lower-case, without "_" and "-": "alertname", "alert_name", "alertName"...
NAME_KEYS = ("alertname", "alert")
TEXT_KEYS = ("message", "summary", "description")
SUMMARY_CHARS = 160
# Identifying fields listed when the alert has no text and the session no summary.
LISTED_FIELDS = 3
LISTED_VALUE_CHARS = 60


@dataclass(frozen=True)
class AlertHeading:
    """``title``: the alert's name, or the session's alert type when the data names none.
    ``summary``: one line, possibly empty."""

    title: str
    summary: str


def alert_heading(alert_type: str, alert_data, final_analysis_summary: str | None) -> AlertHeading:
    """The alert's name and a one-line summary, for lists and page headings.

    Summary, the first there is of: the alert's own text (message, summary or
    description, at the top or in Alertmanager's ``annotations``); TARSy's
    summary of its final analysis; the alert's first few other fields
    (``namespace: payments · pod: payments-api-7d9``).
    """
    if isinstance(alert_data, str):
        # Go TARSy keeps the alert as the text its sender posted: often JSON, else plain text.
        data = _json_object(alert_data)
        if data is None:
            return AlertHeading(
                title=alert_type, summary=_one_line(alert_data or final_analysis_summary, SUMMARY_CHARS)
            )
    else:
        data = alert_data if isinstance(alert_data, dict) else {}
    labels = _object(data, "labels")
    annotations = _object(data, "annotations")
    name = _first_text([data, labels], NAME_KEYS)
    text = _first_text([data, annotations], TEXT_KEYS)
    summary = text or final_analysis_summary or _listed_fields(data)
    return AlertHeading(
        title=_one_line(name, SUMMARY_CHARS) or alert_type, summary=_one_line(summary, SUMMARY_CHARS)
    )


# A text alert is read as JSON only up to this size: headings are made for every row of a list.
MAX_JSON_ALERT_CHARS = 65536


def _json_object(text: str) -> dict | None:
    """The JSON object ``text`` holds, or None (not JSON, not an object, or too long to read)."""
    if len(text) > MAX_JSON_ALERT_CHARS or not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    return value if isinstance(value, dict) else None


def _key(name) -> str:
    return str(name).lower().replace("_", "").replace("-", "")


def _object(data: dict, key: str) -> dict:
    value = next((value for name, value in data.items() if _key(name) == key), None)
    return value if isinstance(value, dict) else {}


def _first_text(objects: list[dict], keys: tuple[str, ...]) -> str | None:
    """The first non-blank string under one of ``keys`` (in their order), object by object."""
    for obj in objects:
        by_key = {_key(name): value for name, value in obj.items()}
        for key in keys:
            value = by_key.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


def _listed_fields(data: dict) -> str:
    shown = (
        f"{name}: {_one_line(str(value), LISTED_VALUE_CHARS)}"
        for name, value in data.items()
        if _key(name) not in NAME_KEYS
        and isinstance(value, str | int | float)
        and not isinstance(value, bool)
        and str(value).strip()
    )
    # Lists call this for every row: stop at the fields shown.
    return " · ".join(itertools.islice(shown, LISTED_FIELDS))


def _one_line(text: str | None, limit: int) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters (… marks a cut)."""
    if not text:
        return ""
    # Only the head is read: alert fields can be megabytes.
    line = " ".join(text[: limit * 4].split())
    if len(line) <= limit and len(text) <= limit * 4:
        return line
    cut = line[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:·-") + "…"
