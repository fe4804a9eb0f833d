from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring import services


class Command(BaseCommand):
    help = (
        "Mark failed the scorings stuck pending or in progress: by default those in progress for "
        "longer than SCORING_JOB_TIMEOUT_S and those pending for longer than SCORING_PENDING_TIMEOUT_S."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than", type=float, metavar="SECONDS", help="one age threshold for pending and in-progress rows"
        )
        parser.add_argument(
            "--all", action="store_true", help="fail every pending and in-progress scoring (no worker may be running)"
        )

    def handle(self, *args, **options):
        if options["all"] and options["older_than"] is not None:
            raise CommandError("--all and --older-than exclude each other")
        if options["older_than"] is not None and options["older_than"] < 0:
            raise CommandError("--older-than must be zero or more seconds")
        failed = services.expire_stale_scorings(include_all=options["all"], older_than_s=options["older_than"])
        threshold = (
            "all" if options["all"] else
            f"older than {options['older_than']:g} s" if options["older_than"] is not None else
            f"in progress > {settings.SCORING_JOB_TIMEOUT_S} s, pending > {settings.SCORING_PENDING_TIMEOUT_S} s"
        )
        self.stdout.write(f"orphaned scorings marked failed: {failed} ({threshold})")
