import getpass

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring.management.options import since_us
from scoring.models import SessionSource
from scoring.tarsy import client as tarsy_client
from scoring.tarsy import sync
from scoring.tarsy.url import plain_http_problem, tarsy_url_problem


class Command(BaseCommand):
    help = (
        "Import the finished sessions of a running TARSy (tarsy-bot's history API or Go TARSy's API, "
        "whichever answers at the URL) that are new or changed since the last sync; the same ingest as "
        "import_sessions. A rejected session is "
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
            "--token-file",
            metavar="PATH",
            help="a file holding the token, e.g. a projected ServiceAccount token (default: $TARSY_TOKEN_FILE)",
        )
        parser.add_argument(
            "--ca-bundle",
            metavar="PATH",
            help="PEM file of the CAs of TARSy's HTTPS certificate (default: $TARSY_CA_BUNDLE)",
        )
        parser.add_argument(
            "--allow-plain-http",
            action="store_true",
            help="send the credentials over plain http to another machine (default: $TARSY_ALLOW_PLAIN_HTTP)",
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

    def handle(self, *args, url, token, token_file, ca_bundle, allow_plain_http, header, since, score, **options):
        url = url or settings.TARSY_URL
        if not url:
            raise CommandError("give TARSy's URL, or set TARSY_URL")
        if tarsy_url_problem(url):
            raise CommandError(tarsy_url_problem(url))
        try:
            headers = dict(tarsy_client.parse_header(text) for text in header)
        except ValueError as exc:
            raise CommandError(f"--header {exc}") from None
        if token is not None and token_file is not None:
            raise CommandError("--token and --token-file are both given: give one")
        if token is None and token_file is None:
            token, token_file = settings.TARSY_TOKEN, settings.TARSY_TOKEN_FILE
        problem = plain_http_problem(
            url,
            has_credentials=bool(token or token_file or headers),
            allowed=allow_plain_http or settings.TARSY_ALLOW_PLAIN_HTTP,
        )
        if problem:
            raise CommandError(problem)
        client = tarsy_client.TarsyClient.configured(
            url,
            token=token or "",
            token_file=token_file or "",
            headers=headers,
            ca_bundle=settings.TARSY_CA_BUNDLE if ca_bundle is None else ca_bundle,
        )
        try:
            report = sync.sync_sessions(
                client,
                since_us=since_us(since) if since else None,
                score=score,
                triggered_by=f"{sync.SCORING_TRIGGER_PREFIX}cli:{getpass.getuser()}",
            )
        except sync.SyncAlreadyRunning as exc:
            self.stdout.write(f"{exc}; nothing done")
            return
        except tarsy_client.SyncError as exc:
            if exc.report is not None:
                self._write(exc.report)
            raise CommandError(str(exc)) from None
        self._write(report)
        if report.rejected:
            raise CommandError(f"{len(report.rejected)} rejected")

    def _write(self, report: sync.SyncReport) -> None:
        if report.source:
            self.stdout.write(f"source: {SessionSource(report.source).label}")
        for session_id, note in report.noted:
            self.stdout.write(f"noted: {session_id}: {note}")
        for session_id, reason in report.rejected:
            self.stderr.write(f"rejected: {session_id}: {tarsy_client.printable(reason)}")
        for session_id in report.gone:
            self.stderr.write(f"gone: {session_id}: listed, then not found (deleted in TARSy meanwhile)")
        self.stdout.write(", ".join(f"{outcome}: {count}" for outcome, count in report.counts().items()))
        if report.scoring:
            self.stdout.write(
                "scoring: "
                + ", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in report.scoring.items())
            )
