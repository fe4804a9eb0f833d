"""Cost controls of automatic scoring beside the daily count cap (docs/scoring.md, "Cost
controls"): which share of the sessions a sync imports is scored (SCORING_AUTO_SCORE_SHARES),
and a spend budget in USD per UTC day and calendar month (SCORING_BUDGET_USD_PER_DAY,
SCORING_BUDGET_USD_PER_MONTH).

The spend is the sum of the cost stored on each scoring (``SessionScore.cost_usd``: litellm's
cost of its calls, the prompt cache's discount included) completed in the period, read from
the database, so every process counts the same (each remembers the month's earlier days for
the day: ``_spend_of_earlier_days``). Once it reaches a budget, automatic scorings
wait for the next period (``services.hold_automatic_scorings``) and a manual one is refused
until its requester confirms (``OverBudget``).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings

from scoring import identities, selectors
from scoring.judge.circuit import iso_time


# How the ``score_triggered_by`` of an automatic scoring starts: one a sync requested, which the
# budget holds back (and the daily cap counts).
AUTOMATIC = identities.SYNC_SCORING


# --- Sampling ----------------------------------------------------------------------------------


def auto_score_share(alert_type: str, chain_id: str) -> float:
    """The share of automatically imported sessions of this alert type and chain that get
    scored: the alert type's share if one is set (a chain serves several alert types, so the
    alert type is the more specific), else the chain's, else the default."""
    shares = settings.SCORING_AUTO_SCORE_SHARES
    if alert_type in shares["alert_types"]:
        return shares["alert_types"][alert_type]
    return shares["chains"].get(chain_id, shares["default"])


def is_sampled(session_id, share: float) -> bool:
    """Whether a session falls in a sampling ``share`` (0 to 1): decided by its id alone, so a
    sync run again picks the same sessions, and a smaller share picks a subset of a larger one."""
    digest = hashlib.sha256(str(uuid.UUID(str(session_id))).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


# --- The spend budget ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spend:
    """What scorings completed in the current UTC day and month cost, and whether a budget is used up."""

    today_usd: Decimal
    month_usd: Decimal
    # Which budget is used up, in a sentence, "" when none is; and when its period ends (the
    # month's when both are).
    used_up: str = ""
    frees_at_us: int | None = None

    @property
    def waiting_reason(self) -> str:
        """Why automatic scorings wait (``SessionScore.waiting_reason``)."""
        return f"{self.used_up}; automatic scorings wait until {iso_time(self.frees_at_us)}"


def budgets_set() -> bool:
    return (settings.SCORING_BUDGET_USD_PER_DAY, settings.SCORING_BUDGET_USD_PER_MONTH) != (None, None)


def current_spend(now_us: int) -> Spend:
    """The spend of the day and month that ``now_us`` is in, against the budgets."""
    day = datetime.fromtimestamp(now_us / 1_000_000, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    next_month = month.replace(year=month.year + 1, month=1) if month.month == 12 else month.replace(month=month.month + 1)
    today = selectors.spend_since_usd(_us(day))
    this_month = _spend_of_earlier_days(_us(month), _us(day)) + today
    # The month's first: waiting for tomorrow would not help.
    for period, spent, setting, frees_at_us in (
        ("monthly", this_month, "SCORING_BUDGET_USD_PER_MONTH", _us(next_month)),
        ("daily", today, "SCORING_BUDGET_USD_PER_DAY", _us(day) + 86_400_000_000),
    ):
        limit = getattr(settings, setting)
        if limit is not None and spent >= Decimal(str(limit)):
            used_up = f"the {period} scoring budget is used up (${spent:,.2f} spent of {setting}=${limit:,.2f})"
            return Spend(today, this_month, used_up, frees_at_us)
    return Spend(today, this_month)


def _us(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000


# The spend of the month's days before today, read once a day per process: a scoring completed
# on an earlier day no longer changes, so each check sums today's scorings alone.
_earlier_days: dict[tuple[int, int], Decimal] = {}


def _spend_of_earlier_days(month_us: int, day_us: int) -> Decimal:
    key = (month_us, day_us)
    if key not in _earlier_days:
        spent = selectors.spend_between_usd(month_us, day_us)
        _earlier_days.clear()
        _earlier_days[key] = spent
    return _earlier_days[key]


def forget_earlier_days() -> None:
    """Read the month's earlier days again at the next check (tests change the database under one process)."""
    _earlier_days.clear()


class OverBudget(Exception):
    """A manual scoring asked for while a budget is used up, without confirming; str() says why."""

    def __init__(self, spend: Spend):
        super().__init__(spend.used_up)
        self.spend = spend


def confirm_manual_scoring(now_us: int, *, confirmed: bool) -> None:
    """Raise ``OverBudget`` when a budget is used up and the requester has not confirmed."""
    if confirmed or not budgets_set():
        return
    spend = current_spend(now_us)
    if spend.used_up:
        raise OverBudget(spend)
