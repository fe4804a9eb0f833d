"""What validating a session document means for every source: errors keyed by the JSON
path of the offending value (DRF style, so that an operator can find it in a
multi-megabyte document: ``{"stages[2].llm_interactions[0].details.conversation": [...]}``),
a checker that collects them, and what storing a checked document needs (NUL characters
replaced, its size measured). Each source's own checks are in its ``document`` module.
"""

import json
import re
import uuid

from rest_framework.settings import api_settings

from scoring.models import AlertSession

DOCUMENT_ERRORS_KEY = api_settings.NON_FIELD_ERRORS_KEY
# A badly broken document can have an error per interaction; past this many,
# the rest are counted instead of listed.
MAX_REPORTED_ERRORS = 50
# PostgreSQL cannot store NUL characters in text or JSON, and tool output holds
# them (/proc/*/cmdline, binary files): each is stored as U+FFFD instead, and the
# session notes how many and where. Encoded as JSON, a NUL is "u0000" after an odd
# number of backslashes; after an even number it is the harmless text "\u0000".
NUL = "\x00"
NUL_REPLACEMENT = "\ufffd"
_ENCODED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A note lists at most this many paths of replaced NULs, then counts the rest.
MAX_NOTED_NUL_PATHS = 10
# Timestamps are stored in 64-bit integer columns.
MAX_TIMESTAMP_US = 2**63 - 1

_KIND_CHECKS = {
    "an object": lambda value: isinstance(value, dict),
    "a list": lambda value: isinstance(value, list),
    "a string": lambda value: isinstance(value, str),
    "an integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
}


class InvalidSession(ValueError):
    """A document that is not a storable TARSy session.

    ``errors`` maps the JSON path of each bad value to its messages.
    """

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(format_errors(errors))
        self.errors = errors


def format_errors(errors: dict[str, list[str]]) -> str:
    """The errors on one line, each prefixed with its path."""
    return "; ".join(
        " ".join(messages) if path == DOCUMENT_ERRORS_KEY else f"{path}: {' '.join(messages)}"
        for path, messages in errors.items()
    )


def describe(value) -> str:
    """The JSON type of a value, for messages: 'a list', 'null', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    for kind, check in _KIND_CHECKS.items():
        if check(value):
            return kind
    return type(value).__name__


def finish_fields(fields: dict) -> dict:
    """A checked document's AlertSession field values made storable: NUL characters
    replaced (and noted in ``ingest_notes``), and ``investigation_bytes`` measured."""
    nuls = NulReplacement()
    for key, value in fields.items():
        if isinstance(value, str):  # a text column
            fields[key] = nuls.in_text(value, key)
    # Encoded once (the C encoder: fast on megabytes), to measure it and to look inside for NULs.
    heavy = [key for key in AlertSession.HEAVY_FIELDS if key in fields]
    encoded = {key: compact_json(fields[key]) for key in ("alert_data", *heavy) if key in fields}
    for key, text in encoded.items():
        if "u0000" in text and _ENCODED_NUL.search(text):
            fields[key] = nuls.in_json(fields[key], key)
            encoded[key] = compact_json(fields[key])
    fields["investigation_bytes"] = sum(len(encoded[key].encode()) for key in heavy)
    fields["ingest_notes"] = nuls.notes()
    return fields


class NulReplacement:
    """Replaces NUL characters with U+FFFD, counting them by JSON path."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def in_text(self, value: str | None, path: str) -> str | None:
        if value is None or NUL not in value:
            return value
        self.counts[path] = self.counts.get(path, 0) + value.count(NUL)
        return value.replace(NUL, NUL_REPLACEMENT)

    def in_json(self, value, path: str):
        """A copy of a JSON value with NULs replaced in every string, keys included."""
        if isinstance(value, str):
            return self.in_text(value, path)
        if isinstance(value, list):
            return [self.in_json(item, f"{path}[{index}]") for index, item in enumerate(value)]
        if isinstance(value, dict):
            copy = {}
            for key, item in value.items():
                key = self.in_text(key, f"{path} (a key)")
                copy[key] = self.in_json(item, json_path(path, key))
            return copy
        return value

    def notes(self) -> list[str]:
        """One sentence saying how many were replaced and where; none if none were."""
        if not self.counts:
            return []
        total = sum(self.counts.values())
        paths = list(self.counts)
        where = ", ".join(f"{path} ({self.counts[path]})" for path in paths[:MAX_NOTED_NUL_PATHS])
        if len(paths) > MAX_NOTED_NUL_PATHS:
            where += f" and {len(paths) - MAX_NOTED_NUL_PATHS} more values"
        characters = "character" if total == 1 else "characters"
        return [
            f"{total} NUL {characters} (\\u0000), which the database cannot store, replaced with U+FFFD "
            f"in: {where}."
        ]


def compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


class DocumentCheck:
    """Checks parts of one document, collecting errors by path.

    Each method returns the checked value, or None when it is absent, null or
    invalid (the error, if any, is recorded).
    """

    def __init__(self):
        self.errors: dict[str, list[str]] = {}

    def fail(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def reported_errors(self) -> dict[str, list[str]]:
        paths = list(self.errors)
        reported = {path: self.errors[path] for path in paths[:MAX_REPORTED_ERRORS]}
        if len(paths) > MAX_REPORTED_ERRORS:
            reported.setdefault(DOCUMENT_ERRORS_KEY, []).append(
                f"{len(paths) - MAX_REPORTED_ERRORS} more invalid values not listed; "
                "fix these and send the document again."
            )
        return reported

    def value(self, obj: dict, key: str, parent: str, kind: str, *, required=True, nullable=False, what=""):
        """A value of JSON type ``kind``; ``what`` says more about it in messages."""
        path = json_path(parent, key)
        expected = f"{kind}{what} or null" if nullable else f"{kind}{what}"
        if key not in obj:
            if required:
                self.fail(path, f"This field is required ({expected}).")
            return None
        value = obj[key]
        if value is None and nullable:
            return None
        if not _KIND_CHECKS[kind](value):
            self.fail(path, f"Expected {expected}, got {describe(value)}.")
            return None
        return value

    def text(self, obj: dict, key: str, parent: str, *, required=False) -> str | None:
        """A string; required ones must be non-empty, optional ones may be null or absent."""
        value = self.value(obj, key, parent, "a string", required=required, nullable=not required)
        if value is None:
            return None
        path = json_path(parent, key)
        if required and not value.strip():
            self.fail(path, "This field may not be blank.")
            return None
        if not parent:  # a column of its own: may have a length limit
            max_length = AlertSession._meta.get_field(key).max_length
            if max_length and len(value) > max_length:
                self.fail(
                    path, f"Ensure this field has no more than {max_length} characters (it has {len(value)})."
                )
                return None
        return value

    def uuid_field(self, obj: dict, key: str, parent: str) -> uuid.UUID | None:
        """A string that is a UUID, as a UUID."""
        value = self.value(obj, key, parent, "a string")
        if value is None:
            return None
        try:
            return uuid.UUID(value)
        except ValueError:
            self.fail(json_path(parent, key), f"'{value[:100]}' is not a valid UUID.")
            return None

    def timestamp(self, document: dict, key: str, *, required: bool) -> int | None:
        value = self.value(document, key, "", "an integer", required=required, nullable=not required)
        if value is not None and not 0 <= value <= MAX_TIMESTAMP_US:
            self.fail(
                key, f"Expected microseconds since the Unix epoch (0 to {MAX_TIMESTAMP_US}), got {value}."
            )
            return None
        return value

