from django.core.management.base import BaseCommand

from scoring import tasks, worker


class Command(BaseCommand):
    help = (
        "Run a judge worker cluster (django-q2). First fails the scorings orphaned by workers that "
        "died and schedules that cleanup every minute. SIGTERM or Ctrl-C stops it: scorings in flight "
        "end failed with 'worker shut down'. With TARSY_URL set, it also syncs sessions from that TARSy "
        "every TARSY_SYNC_INTERVAL_S (docs/sync.md)."
    )

    def handle(self, *args, **options):
        failed = tasks.cleanup_orphans()
        tasks.ensure_cleanup_schedule()
        self.stdout.write(f"orphaned scorings marked failed: {failed}", ending="\n")
        self.stdout.flush()
        worker.run_cluster()
