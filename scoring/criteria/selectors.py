"""Reads of the criteria versions: which version judges a session, whether a score's criteria
are current, a version's texts (docs/criteria.md)."""

from dataclasses import dataclass

from django.db.models import BooleanField, Case, CharField, Q, QuerySet, Value, When

from scoring.judge.prompts import PROMPT_HASH, SHIPPED_CRITERIA, CalibrationExample, Criteria
from scoring.models import (
    CriteriaAction,
    CriteriaChange,
    CriteriaScope,
    CriteriaState,
    CriteriaVersion,
    SessionScore,
)


@dataclass(frozen=True)
class CurrentCriteria:
    """The hash of the current version of every scope that has one, at one moment.

    A session is judged by the current version of its alert type, else of its chain, else the
    global one (``hash_for``). An alert type is the narrower scope: TARSy routes each alert
    type to one chain, and a chain serves one or more alert types.
    """

    global_hash: str
    by_alert_type: dict[str, str]
    by_chain: dict[str, str]

    def scope_for(self, alert_type: str, chain_id: str) -> tuple[str, str]:
        """The scope (and its value) whose current version judges such a session."""
        if alert_type in self.by_alert_type:
            return CriteriaScope.ALERT_TYPE, alert_type
        if chain_id in self.by_chain:
            return CriteriaScope.CHAIN, chain_id
        return CriteriaScope.GLOBAL, ""

    def hash_for(self, alert_type: str, chain_id: str) -> str:
        scope, value = self.scope_for(alert_type, chain_id)
        return {CriteriaScope.ALERT_TYPE: self.by_alert_type, CriteriaScope.CHAIN: self.by_chain}.get(
            scope, {"": self.global_hash}
        )[value]

    def is_current(self, prompt_hash: str | None, alert_type: str, chain_id: str) -> bool:
        """Whether a score of a session of this alert type and chain was made under the criteria
        that judge it now (else it is obsolete)."""
        return prompt_hash == self.hash_for(alert_type, chain_id)

    def hashes(self) -> set[str]:
        return {self.global_hash, *self.by_alert_type.values(), *self.by_chain.values()}

    def current_q(self, hash_field: str, session: str) -> Q:
        """``is_current`` in SQL, for rows whose criteria hash is ``hash_field`` and whose
        session's columns are reached by the prefix ``session`` ("" for the sessions
        themselves, "session__" for scores): the hash equals a CASE over the scopes, in the
        order ``scope_for`` takes them (the first that matches wins)."""
        scoped = [
            *(
                When(**{f"{session}alert_type": value}, then=Value(h))
                for value, h in self.by_alert_type.items()
            ),
            *(When(**{f"{session}chain_id": value}, then=Value(h)) for value, h in self.by_chain.items()),
        ]
        if not scoped:
            return Q(**{hash_field: self.global_hash})
        expected = Case(*scoped, default=Value(self.global_hash), output_field=CharField())
        return Q(**{hash_field: expected})


def current_criteria() -> CurrentCriteria:
    """The current version of each scope, in one query. Without a current global version
    (a database emptied by hand) the shipped criteria are the global ones."""
    global_hash, by_alert_type, by_chain = PROMPT_HASH, {}, {}
    rows = CriteriaVersion.objects.filter(state=CriteriaState.CURRENT).values_list(
        "scope", "scope_value", "prompt_hash"
    )
    for scope, scope_value, prompt_hash in rows:
        if scope == CriteriaScope.GLOBAL:
            global_hash = prompt_hash
        elif scope == CriteriaScope.ALERT_TYPE:
            by_alert_type[scope_value] = prompt_hash
        else:
            by_chain[scope_value] = prompt_hash
    return CurrentCriteria(global_hash, by_alert_type, by_chain)


def is_current_anywhere(prompt_hash: str | None) -> bool:
    """Whether ``prompt_hash`` is the current criteria of some scope: for figures grouped by
    hash, which belong to no one session."""
    return prompt_hash in current_criteria().hashes()


def criteria_q(
    *,
    obsolete: bool,
    field: str = "prompt_hash",
    session: str = "session__",
    current: CurrentCriteria | None = None,
) -> Q:
    """Rows (scores, or sessions with ``session=""``) whose criteria hash ``field`` is not the
    current one of their session's scope (``obsolete``), or is; by ``current`` (default: read now)."""
    current = (current or current_criteria()).current_q(field, session)
    return Q(**{f"{field}__isnull": False}) & ~current if obsolete else current


def with_criteria_current(
    rows: QuerySet,
    *,
    field: str = "prompt_hash",
    session: str = "session__",
    current: CurrentCriteria | None = None,
) -> QuerySet:
    """Annotate each row with ``criteria_current``: ``criteria_q`` as a column, for lists
    that label every row current or obsolete at the cost of one query."""
    is_current = Case(
        When(criteria_q(obsolete=False, field=field, session=session, current=current), then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )
    return rows.annotate(criteria_current=is_current)


def criteria_of_hash(prompt_hash: str) -> Criteria | None:
    """The texts that make ``prompt_hash``: the shipped ones without a query (the hash names
    its texts), else those of any version that holds them; None when no version does."""
    if prompt_hash == PROMPT_HASH:
        return SHIPPED_CRITERIA
    version = (
        CriteriaVersion.objects.filter(prompt_hash=prompt_hash)
        .exclude(state=CriteriaState.DRAFT)
        .only("system_prompt", "score_prompt", "followup_prompt", "examples")
        .first()
    )
    return criteria_of(version) if version is not None else None


def criteria_of(version: CriteriaVersion) -> Criteria:
    return Criteria(
        score_prompt=version.score_prompt,
        followup_prompt=version.followup_prompt,
        system_prompt=version.system_prompt,
        examples=tuple(CalibrationExample.from_json(example) for example in version.examples),
    )


def criteria_versions(
    *, state: str | None = None, scope: str | None = None, scope_value: str | None = None
) -> QuerySet[CriteriaVersion]:
    """Versions newest first, filtered by state and scope, without their texts."""
    versions = CriteriaVersion.objects.defer("system_prompt", "score_prompt", "followup_prompt", "examples")
    if state:
        versions = versions.filter(state=state)
    if scope:
        versions = versions.filter(scope=scope)
    if scope_value is not None:
        versions = versions.filter(scope_value=scope_value)
    return versions.order_by("-id")


def current_version(scope: str, scope_value: str) -> CriteriaVersion | None:
    """The current version of exactly this scope (not the one a session falls back to)."""
    return CriteriaVersion.objects.filter(
        state=CriteriaState.CURRENT, scope=scope, scope_value=scope_value
    ).first()


def version_for_session(session) -> CriteriaVersion | None:
    """The current version that judges ``session`` (None: the shipped criteria, no version stored)."""
    return current_version(*current_criteria().scope_for(session.alert_type, session.chain_id))


def changes_of(version: CriteriaVersion) -> QuerySet[CriteriaChange]:
    """Every recorded change that involved ``version``, newest first."""
    return CriteriaChange.objects.filter(
        Q(version=version) | Q(replaced=version) | Q(restored=version)
    ).select_related("version", "replaced", "restored")


def replaced_by_promotion(version: CriteriaVersion) -> CriteriaVersion | None:
    """The version ``version``'s latest promotion retired: what rolling it back makes current again
    (None: it replaced none)."""
    promotion = (
        CriteriaChange.objects.filter(version=version, action=CriteriaAction.PROMOTE)
        .select_related("replaced")
        .order_by("-id")
        .first()
    )
    return promotion.replaced if promotion is not None else None


def scores_under(prompt_hash: str) -> QuerySet[SessionScore]:
    """Every scoring made under these criteria (any version holding ``prompt_hash``), newest
    first, without their analyses."""
    scores = SessionScore.objects.filter(prompt_hash=prompt_hash).defer(
        "score_analysis", "missing_tools_analysis"
    )
    return scores.order_by("-scored_at_us", "-score_id")
