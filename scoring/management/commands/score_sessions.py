import getpass

from django.conf import settings
from django.core.management.base import BaseCommand

from scoring import batches, identities, selectors
from scoring.judge.prompts import estimated_tokens
from scoring.management.options import since_us

# How many of the sessions over SCORING_MAX_INPUT_TOKENS a dry run names.
LISTED_OVER_BOUND = 20


class Command(BaseCommand):
    help = (
        "Queue judge scorings for many finished sessions, through the same service as the API. "
        "--unscored, --obsolete and --failed select sessions (any of them); --obsolete and --failed "
        "re-score what they select; --force re-scores every selected session."
    )

    def add_arguments(self, parser):
        parser.add_argument("--unscored", action="store_true", help="sessions never scored")
        parser.add_argument("--obsolete", action="store_true", help="scored under obsolete criteria")
        parser.add_argument("--failed", action="store_true", help="whose latest scoring failed")
        parser.add_argument("--since", metavar="DATE", help="sessions started on or after this date/datetime (UTC)")
        parser.add_argument("--alert-type", metavar="T", help="only this alert type")
        parser.add_argument("--force", action="store_true", help="re-score even sessions with a current score")
        parser.add_argument("--dry-run", action="store_true", help="print how many and the estimated input tokens")
        parser.add_argument("--triggered-by", default=None, help="recorded as score_triggered_by (default: $USER)")

    def handle(self, *args, **options):
        sessions = selectors.sessions_to_score(
            unscored=options["unscored"],
            obsolete=options["obsolete"],
            failed=options["failed"],
            since_us=since_us(options["since"]) if options["since"] else None,
            alert_type=options["alert_type"],
        )
        if options["dry_run"]:
            self.stdout.write(
                f"would score {sessions.count()} sessions; estimated judge input: "
                f"~{selectors.estimate_input_tokens(sessions):,} tokens"
            )
            self._write_over_bound(sessions)
            return
        outcome = batches.score_sessions(
            list(sessions.values_list("session_id", flat=True)),
            triggered_by=options["triggered_by"] or f"{identities.COMMAND}{getpass.getuser()}",
            force_rescore=options["force"] or options["obsolete"] or options["failed"],
        )
        self.stdout.write(", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in outcome.items()))

    def _write_over_bound(self, sessions) -> None:
        over = selectors.over_input_bound(sessions)
        count = over.count()
        if not count:
            return
        self.stdout.write(
            f"{count} of them are over SCORING_MAX_INPUT_TOKENS={settings.SCORING_MAX_INPUT_TOKENS:,} "
            "(estimated) and would fail without a judge call:"
        )
        for session_id, chars in over.values_list("session_id", "judge_prompt_chars")[:LISTED_OVER_BOUND]:
            self.stdout.write(f"  {session_id}: ~{estimated_tokens(chars):,} tokens")
        if count > LISTED_OVER_BOUND:
            self.stdout.write(f"  ... and {count - LISTED_OVER_BOUND} more")
