import getpass
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring import batches, budget, identities, selectors, services
from scoring.criteria import selectors as criteria_selectors
from scoring.judge import estimates
from scoring.management.options import since_us

SESSION_COLUMN = 36  # a session id


class Command(BaseCommand):
    help = (
        "Queue judge scorings for many finished sessions, through the same service as the API. "
        "--unscored, --obsolete and --failed select sessions (any of them), --session selects by id; "
        "--obsolete and --failed re-score what they select; --force re-scores every selected session."
    )

    def add_arguments(self, parser):
        parser.add_argument("--unscored", action="store_true", help="sessions never scored")
        parser.add_argument("--obsolete", action="store_true", help="scored under obsolete criteria")
        parser.add_argument("--failed", action="store_true", help="whose latest scoring failed")
        parser.add_argument(
            "--session", action="append", metavar="ID", default=[], help="only this session (repeatable)"
        )
        parser.add_argument("--since", metavar="DATE", help="sessions started on or after this date/datetime (UTC)")
        parser.add_argument("--alert-type", metavar="T", help="only this alert type")
        parser.add_argument("--force", action="store_true", help="re-score even sessions with a current score")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="queue nothing: list each session with its judge prompt's tokens as fitted to the "
            "judge model's window, whether it would be cut, and its estimated cost",
        )
        parser.add_argument("--triggered-by", default=None, help="recorded as score_triggered_by (default: $USER)")
        parser.add_argument(
            "--over-budget",
            action="store_true",
            help="score even though a spend budget (SCORING_BUDGET_USD_PER_DAY or _PER_MONTH) is used up",
        )

    def handle(self, *args, **options):
        sessions = selectors.sessions_to_score(
            unscored=options["unscored"],
            obsolete=options["obsolete"],
            failed=options["failed"],
            since_us=since_us(options["since"]) if options["since"] else None,
            alert_type=options["alert_type"],
        )
        if options["session"]:
            wanted = [_session_id(value) for value in options["session"]]
            sessions = sessions.filter(session_id__in=wanted)
            found = {str(session_id) for session_id in sessions.values_list("session_id", flat=True)}
            for session_id in dict.fromkeys(str(session_id) for session_id in wanted):
                if session_id not in found:
                    self.stderr.write(f"{session_id}: not selected (no such session, not finished, or not matching)")
        if options["dry_run"]:
            self._dry_run(sessions)
            return
        try:
            budget.confirm_manual_scoring(services.now_us(), confirmed=options["over_budget"])
        except budget.OverBudget as over:
            raise CommandError(f"{over}; add --over-budget to score anyway") from None
        outcome = batches.score_sessions(
            list(sessions.values_list("session_id", flat=True)),
            triggered_by=options["triggered_by"] or f"{identities.COMMAND}{getpass.getuser()}",
            force_rescore=options["force"] or options["obsolete"] or options["failed"],
        )
        self.stdout.write(", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in outcome.items()))

    def _dry_run(self, sessions) -> None:
        model = settings.SCORING_LLM_MODEL or "(SCORING_LLM_MODEL not set)"
        assumptions = estimates.Assumptions.now(*selectors.mean_output_tokens(settings.SCORING_LLM_MODEL))
        self.stdout.write(
            f"would score {sessions.count()} sessions with {model}, whose context window is "
            f"{assumptions.window:,} tokens ({assumptions.window_source})"
        )
        self.stdout.write(f"{'session':<{SESSION_COLUMN}}  {'prompt tokens':>13}  {'cut':<28}  est. cost")
        sent = scorings = priced = 0
        cost_usd = 0
        current = criteria_selectors.current_criteria()
        criteria_by_hash = {}
        # Each session whole (its deferred fields too), one at a time: it is rendered and fitted
        # under the criteria that would judge it.
        for session in sessions.defer(None).iterator(chunk_size=20):
            prompt_hash = current.hash_for(session.alert_type, session.chain_id)
            if prompt_hash not in criteria_by_hash:
                criteria_by_hash[prompt_hash] = criteria_selectors.criteria_of_hash(prompt_hash)
            estimate = estimates.estimate(session, assumptions, criteria_by_hash[prompt_hash])
            if estimate.failure:
                self._row(session, "-", f"would fail: {estimate.failure}")
                continue
            scorings += 1
            sent += estimate.input_tokens
            cut = f"yes: {estimate.coverage:.0%} kept, {estimate.cut_results} cut" if estimate.cut else "no"
            cost = "unknown"
            if estimate.cost_usd is not None:
                priced += 1
                cost_usd += estimate.cost_usd
                cost = f"${estimate.cost_usd:.4f}"
            self._row(session, f"{estimate.prompt_tokens:,}", f"{cut:<28}  {cost}")
        total = "unknown"
        if priced:
            total = f"${cost_usd:.4f}" + (f" for the {priced} priced" if priced < scorings else "")
        samples = settings.SCORING_JUDGE_SAMPLES
        replies = (
            f"the mean of {assumptions.output_from_scores} completed scores by this model"
            if assumptions.output_from_scores
            else "the room kept for replies: none completed by this model yet"
        )
        self.stdout.write(
            f"in all: ~{sent:,} input tokens over {scorings} scorings, est. cost {total}; each scoring sends "
            f"its prompt {samples + 1} times (SCORING_JUDGE_SAMPLES={samples}, then turn 2), its replies taken "
            f"as {assumptions.output_tokens:,} output tokens ({replies}); litellm's prices, no cache discount"
        )

    def _row(self, session, tokens: str, rest: str) -> None:
        self.stdout.write(f"{session.session_id!s:<{SESSION_COLUMN}}  {tokens:>13}  {rest}")


def _session_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise CommandError(f"--session {value!r} is not a session id (a UUID)") from None
