"""Delete scoring events older than SCORING_EVENT_RETENTION_S."""

from django.core.management.base import BaseCommand

from scoring.realtime import events


class Command(BaseCommand):
    help = "Delete stored scoring events older than SCORING_EVENT_RETENTION_S (web processes do it hourly)."

    def handle(self, *args, **options):
        deleted = events.prune()
        self.stdout.write(f"deleted {deleted} scoring events")
