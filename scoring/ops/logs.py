"""Log records that carry their context: which scoring, which session.

``log_context(score_id=..., session_id=...)`` sets fields for the code that
runs inside it (a ``contextvars`` variable, so concurrent asyncio tasks and
threads started with a copied context keep their own). ``ContextFilter``, on
the handler, copies the fields onto every record, and both formatters print
them:

* ``PlainFormatter`` (the default, ``LOG_FORMAT=text``): the usual line, then
  the context fields, ``[score_id=… session_id=…]``. Line breaks and other
  control characters in the message (its arguments included: a judge's reply,
  a client's path) and in the fields are written as escapes (``\n``,
  ``\x1b``), so that no text can pass for a record of its own;
* ``JsonFormatter`` (``LOG_FORMAT=json``): one JSON object per line, with
  ``timestamp``, ``level``, ``logger``, ``message``, the context fields, the
  ``extra=`` fields of the call, and ``exception`` when there is one.

This module is loaded by the logging configuration before Django's apps are
ready: it must import nothing from Django.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType

# Each log_context sets a new mapping; none is changed in place.
_context: ContextVar[Mapping[str, object]] = ContextVar("log_context", default=MappingProxyType({}))

# Attributes every LogRecord has; anything else on a record came from the
# context or from ``extra=``. uvicorn passes each of its start-up lines again with
# terminal colours (``color_message``), which no log line needs.
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "context",
    "color_message",
}


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG: ``config``, and Python's warnings as log records (py.warnings),
    so that they too are lines of LOG_FORMAT rather than raw text on stderr."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Add ``fields`` to every log record made inside the block (nesting adds to them)."""
    token = _context.set(
        {**_context.get(), **{key: value for key, value in fields.items() if value is not None}}
    )
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> dict[str, object]:
    return dict(_context.get())


class ContextFilter(logging.Filter):
    """Copies the current ``log_context`` fields onto each record (``record.context``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.context = current_context()
        return True


class AccessFields(logging.Filter):
    """On uvicorn's access lines (logger ``uvicorn.access``), the request's parts as fields:
    ``client``, ``request`` (method and path) and ``status``, for JSON lines to be queried by."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _http_version, status = record.args
            record.client, record.request, record.status = client, f"{method} {path}", status
        return True


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The context fields, then the ``extra=`` fields of the call."""
    fields = dict(getattr(record, "context", {}))
    fields.update({key: value for key, value in record.__dict__.items() if key not in _RECORD_ATTRIBUTES})
    return fields


# C0 and C1 control characters (line feed, carriage return, escape...) and
# Unicode's line and paragraph separators.
_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """``text`` on one line: each control character as its Python escape."""
    return _CONTROL_CHARACTERS.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


class PlainFormatter(logging.Formatter):
    """``2026-01-01 10:00:00,000 INFO scoring.judge.llm message [score_id=… session_id=…]``."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s %(message)s", **kwargs):
        super().__init__(fmt, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # format() sets record.message anew for each formatter: escaping it here changes no other output.
        record.message = escape_controls(record.message)
        line = super().formatMessage(record)
        fields = getattr(record, "context", {})
        if fields:
            pairs = (f"{key}={escape_controls(str(value))}" for key, value in fields.items())
            line += " [" + " ".join(pairs) + "]"
        return line


_JSON_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "timestamp": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            entry.setdefault(key, value)  # a field named like a key above does not replace it
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a UUID, a Decimal or a datetime in the context is written as text.
        line = json.dumps(entry, default=str, ensure_ascii=False)
        # JSON escapes C0 controls itself; these other line breaks it may write raw.
        return line.translate(_JSON_LINE_BREAKS)
