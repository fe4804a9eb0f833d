"""The names the service's own processes record as who did something: who asked for a
scoring (``score_triggered_by``) or wrote a session (``SessionWrite.written_by``).

Each starts with one of ``RESERVED_PREFIXES``, which end in a colon: Django's user names
cannot hold one (its user name validator), and a proxy's name starting with one is refused
(``scoring.auth``), so no user can be taken for the sync, or use its daily cap of scorings.
"""

# Scorings a sync requests (the worker's, or `sync_sessions --score`); its daily cap counts them.
SYNC_SCORING = "tarsy-sync:"
# Sessions a sync or an import wrote, and scorings `score_sessions` requested.
SYNC_WRITE = "sync_sessions:"
IMPORT_WRITE = "import_sessions:"
COMMAND = "cli:"
RESERVED_PREFIXES = (SYNC_SCORING, SYNC_WRITE, IMPORT_WRITE, COMMAND)


def reserved_prefix(name: str) -> str | None:
    """The reserved prefix ``name`` starts with, in any case, if any."""
    lowered = name.lower()
    return next((prefix for prefix in RESERVED_PREFIXES if lowered.startswith(prefix)), None)
