from django.core.management.base import BaseCommand

from scoring.judge.described import judge_lines


class Command(BaseCommand):
    help = (
        "Print what a judge worker started with this configuration uses: the judge model, its context "
        "window and where that figure comes from, the timeouts, and how many judge calls it sends at once."
    )

    def handle(self, *args, **options):
        for line in judge_lines():
            self.stdout.write(line)
