import os

from django.apps import AppConfig
from django.conf import settings

# Pools inherited from the parent process: kept, never used nor closed (see below).
_inherited_pools: list = []


def _forget_inherited_connection_pools() -> None:
    """In a forked child, leave the parent's PostgreSQL connection pool alone.

    django-q2 forks its processes from processes that have used the database,
    so the child inherits the parent's open pool: its idle connections are the
    parent's sockets, and the threads that maintain it do not exist in the
    child. The child builds a pool of its own on first use instead. The old pool
    is kept referenced, as closing or collecting it could send the server a
    goodbye on the parent's connections or wait on a lock held at the fork.
    """
    from django.db.backends.postgresql.base import DatabaseWrapper

    _inherited_pools.extend(DatabaseWrapper._connection_pools.values())
    DatabaseWrapper._connection_pools.clear()


class ScoringConfig(AppConfig):
    name = "scoring"
    verbose_name = "Scoring"

    def ready(self) -> None:
        if settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
            os.register_at_fork(after_in_child=_forget_inherited_connection_pools)
