import getpass

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring.management.options import since_us
from scoring.tarsy import sync
from scoring.tarsy.url import tarsy_url_problem


class Command(BaseCommand):
    help = (
        "Import the finished sessions of a running TARSy (tarsy-bot's history API) that are new or "
        "changed since the last sync; the same ingest as import_sessions. A rejected session is "
        "reported as 'rejected: SESSION_ID: REASON' and the others are stored all the same; what had "
        "to change to store a session is reported as 'noted: SESSION_ID: NOTE'. Exits "
        "non-zero if anything was rejected or the sync stopped (401/403, TARSy unreachable)."
    )

    def add_arguments(self, parser):
        parser.add_argument("url", nargs="?", metavar="URL", help="TARSy's base URL (default: $TARSY_URL)")
        parser.add_argument(
            "--token", metavar="T", help="sent as 'Authorization: Bearer T' (default: $TARSY_TOKEN)"
        )
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="'NAME: VALUE'",
            help="an extra request header, e.g. an oauth2-proxy cookie (repeatable)",
        )
        parser.add_argument(
            "--since", metavar="DATE", help="only sessions started on or after this date/datetime (UTC)"
        )
        parser.add_argument(
            "--score",
            action="store_true",
            help="request a scoring of each session imported for the first time "
            "(within SCORING_AUTO_SCORE_MAX_PER_DAY)",
        )

    def handle(self, *args, url, token, header, since, score, **options):
        url = url or settings.TARSY_URL
        if not url:
            raise CommandError("give TARSy's URL, or set TARSY_URL")
        if tarsy_url_problem(url):
            raise CommandError(tarsy_url_problem(url))
        try:
            headers = dict(sync.parse_header(text) for text in header)
        except ValueError as exc:
            raise CommandError(f"--header {exc}") from None
        client = sync.TarsyClient.configured(
            url, token=settings.TARSY_TOKEN if token is None else token, headers=headers
        )
        try:
            report = sync.sync_sessions(
                client,
                since_us=since_us(since) if since else None,
                score=score,
                triggered_by=f"{sync.SCORING_TRIGGER_PREFIX}:cli:{getpass.getuser()}",
            )
        except sync.SyncAlreadyRunning as exc:
            self.stdout.write(f"{exc}; nothing done")
            return
        except sync.SyncError as exc:
            if exc.report is not None:
                self._write(exc.report)
            raise CommandError(str(exc)) from None
        self._write(report)
        if report.rejected:
            raise CommandError(f"{len(report.rejected)} rejected")

    def _write(self, report: sync.SyncReport) -> None:
        for session_id, note in report.noted:
            self.stdout.write(f"noted: {session_id}: {note}")
        for session_id, reason in report.rejected:
            self.stderr.write(f"rejected: {session_id}: {reason}")
        for session_id in report.gone:
            self.stderr.write(f"gone: {session_id}: listed, then not found (deleted in TARSy meanwhile)")
        self.stdout.write(", ".join(f"{outcome}: {count}" for outcome, count in report.counts().items()))
        if report.scoring:
            self.stdout.write(
                "scoring: "
                + ", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in report.scoring.items())
            )
