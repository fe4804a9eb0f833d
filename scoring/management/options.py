"""Parsing of command-line values that several management commands share."""

import datetime

from django.core.management.base import CommandError
from django.utils.dateparse import parse_date, parse_datetime


def since_us(value: str) -> int:
    """A ``--since`` date or ISO datetime (UTC unless it says otherwise), in microseconds."""
    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"--since {value!r}: use a date (2026-11-01) or an ISO datetime")
        moment = datetime.datetime.combine(day, datetime.time())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1_000_000)
