import logging

from django.core.management.base import BaseCommand

from scoring import tasks
from scoring.jobs import cluster, queue

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Run a judge worker cluster (django-q2). First fails the scorings orphaned by workers that "
        "died and schedules that cleanup every minute. SIGTERM or Ctrl-C stops it: scorings in flight "
        "end failed with 'worker shut down'. With TARSY_URL set, it also syncs sessions from that TARSy "
        "every TARSY_SYNC_INTERVAL_S (docs/sync.md)."
    )

    def handle(self, *args, **options):
        failed = tasks.cleanup_orphans()
        queue.ensure_cleanup_schedule()
        # A service's lines all go through logging, so that LOG_FORMAT=json holds for each.
        logger.info("orphaned scorings marked failed: %d", failed)
        cluster.run_cluster()
