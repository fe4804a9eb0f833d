"""Read the criteria breakdown and the missing tools of stored scores from their judge text."""

from django.core.management.base import BaseCommand

from scoring import services


class Command(BaseCommand):
    help = (
        "Read each completed score's criteria breakdown (dimensions) and missing tools from the "
        "judge's text, for scores stored before they were read at completion. Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--all",
            action="store_true",
            dest="every_score",
            help="read every completed score again (after the parsers changed), not only those never read",
        )

    def handle(self, *args, every_score: bool, **options):
        read = services.read_stored_replies(every_score=every_score)
        self.stdout.write(
            f"read {read.scores} completed score(s): {read.with_dimensions} with a criteria breakdown "
            f"({read.with_warning} not adding up to the total), {read.with_missing_tools} naming "
            f"{read.missing_tools} missing tool(s)"
        )
