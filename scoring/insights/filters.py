"""The filters every insight shares (statistics, missing tools, reports, agreement, the
insights page), and the scores they select."""

import datetime as dt
from dataclasses import asdict, dataclass

from django.db.models import QuerySet

from scoring.models import AlertSession, SessionScore

FILTER_PARAMS = ("since", "until", "alert_type", "chain_id", "prompt_hash", "include_analysis_missing")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


class InvalidFilter(ValueError):
    """A filter value that cannot be read; the message names the parameter."""


@dataclass(frozen=True)
class InsightFilters:
    """Which sessions an insight covers: those started in [since, until) (microseconds
    since the epoch, as TARSy stores times), of one alert type or chain, scored under
    one criteria hash. None: no restriction. Scores whose judge gave no evaluation
    (``SessionScore.analysis_missing``) are left out unless ``include_analysis_missing``."""

    since_us: int | None = None
    until_us: int | None = None
    alert_type: str | None = None
    chain_id: str | None = None
    prompt_hash: str | None = None
    include_analysis_missing: bool = False

    def as_params(self) -> dict:
        """The filters as query parameters (ISO 8601 times, UTC), without the unset ones:
        what a report stores of its inputs and what links carry."""
        params = {}
        for name, value in asdict(self).items():
            if value is None or value is False:
                continue
            if value is True:
                value = "true"
            if name.endswith("_us"):
                name, value = name.removesuffix("_us"), _iso(value)
            params[name] = value
        return params


def parse_filters(params) -> InsightFilters:
    """Filters from query parameters (a QueryDict or a dict). ``since`` and ``until`` are
    ISO 8601 dates or date-times (UTC when no offset is given); an empty value is no filter."""
    # str(): a JSON body (a report request) may give include_analysis_missing as a boolean.
    values = {name: str(params.get(name) or "").strip() or None for name in FILTER_PARAMS}
    since_us = _parse_time("since", values["since"])
    until_us = _parse_time("until", values["until"])
    if since_us is not None and until_us is not None and until_us <= since_us:
        raise InvalidFilter("until: must be later than since")
    return InsightFilters(
        since_us=since_us,
        until_us=until_us,
        alert_type=values["alert_type"],
        chain_id=values["chain_id"],
        prompt_hash=values["prompt_hash"],
        include_analysis_missing=_parse_bool("include_analysis_missing", values["include_analysis_missing"]),
    )


def _parse_bool(name: str, value: str | None) -> bool:
    if value is None or value.lower() in _FALSE:
        return False
    if value.lower() in _TRUE:
        return True
    raise InvalidFilter(f"{name}: not true or false: {value!r}")


def latest_completed_scores(filters: InsightFilters) -> QuerySet[SessionScore]:
    """Each selected session's newest completed score: a session counts once, by the
    score that replaced its earlier ones (``AlertSession.latest_completed_score_id``)."""
    # A semi-join on the sessions' copies, not a join on both ids: PostgreSQL estimates it
    # right (a join on two correlated columns is estimated at one row, and the plans built
    # on that sort 100,000 rows on disk).
    newest = AlertSession.objects.filter(latest_completed_score_id__isnull=False)
    return with_evaluation(scorings(filters).filter(score_id__in=newest.values("latest_completed_score_id")), filters)


def with_evaluation(scores: QuerySet[SessionScore], filters: InsightFilters) -> QuerySet[SessionScore]:
    """``scores`` without those whose judge gave no evaluation, unless the filters include them."""
    return scores if filters.include_analysis_missing else scores.filter(analysis_missing=False)


def scored_sessions(filters: InsightFilters) -> QuerySet[AlertSession]:
    """The selected sessions that have a completed score, with that score's figures in
    their ``latest_completed_*`` copy: the same selection as ``latest_completed_scores``,
    read from the sessions' table alone."""
    sessions = AlertSession.objects.filter(
        latest_completed_score_id__isnull=False,
        **_session_lookups(filters, session="", prompt_hash="latest_completed_prompt_hash"),
    )
    return sessions if filters.include_analysis_missing else sessions.exclude(latest_completed_analysis_missing=True)


def sessions_with_scorings(filters: InsightFilters) -> QuerySet[AlertSession]:
    """The selected sessions that have any scoring, with the sums over all of them in
    their ``scorings_*`` copy. Not for a ``prompt_hash`` filter: each scoring has its own."""
    if filters.prompt_hash is not None:
        raise ValueError("sessions_with_scorings: a criteria hash selects scorings, not sessions")
    return AlertSession.objects.filter(latest_score_id__isnull=False, **_session_lookups(filters, session=""))


def scorings(filters: InsightFilters) -> QuerySet[SessionScore]:
    """Every scoring of the selected sessions, whatever its status: for counts of
    failed scorings and of cost, where each attempt counts."""
    return SessionScore.objects.filter(**_session_lookups(filters))


def _session_lookups(filters: InsightFilters, session: str = "session__", prompt_hash: str = "prompt_hash") -> dict:
    """The filters as lookups from a model whose path to the session is ``session``
    (empty: the sessions themselves) and whose criteria hash is the field ``prompt_hash``."""
    lookups = {
        f"{session}started_at_us__gte": filters.since_us,
        f"{session}started_at_us__lt": filters.until_us,
        f"{session}alert_type": filters.alert_type,
        f"{session}chain_id": filters.chain_id,
        prompt_hash: filters.prompt_hash,
    }
    return {lookup: value for lookup, value in lookups.items() if value is not None}


def _parse_time(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidFilter(f"{name}: not an ISO 8601 date or date-time: {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        # In UTC, so that as_params can write it back (an offset can push it past year 9999).
        return int(moment.astimezone(dt.UTC).timestamp() * 1_000_000)
    except (OverflowError, ValueError):
        raise InvalidFilter(f"{name}: out of range: {value!r}") from None


def _iso(time_us: int) -> str:
    return dt.datetime.fromtimestamp(time_us / 1_000_000, tz=dt.UTC).isoformat().replace("+00:00", "Z")
