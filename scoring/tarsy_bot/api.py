"""tarsy-bot's history API, as the sync reads it (``scoring.tarsy.sync``, docs/sync.md).

The list (``GET /api/v1/history/sessions``: finished statuses, newest first, 100 a page)
says for each session its status, completion time and chat messages; a session is fetched
(``GET /api/v1/history/sessions/{id}``, the document itself) only when one of them changed
since the last fetch.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from scoring.models import SessionSource, SessionStatus, TarsySyncedSession
from scoring.tarsy.client import TarsyClient
from scoring.tarsy.listing import list_pages

LIST_PATH = "/api/v1/history/sessions"
PAGE_SIZE = 100  # tarsy-bot's largest page_size
FINISHED_STATUSES = SessionStatus.terminal_values()


@dataclass
class TarsyBotApi:
    client: TarsyClient
    source = SessionSource.TARSY_BOT

    def first_page(self, since_us: int | None):
        """The list's first page; ``TarsyNotFound`` tells that tarsy-bot does not answer at
        the client's URL (another TARSy, or none)."""
        return self._page(1, since_us)

    def finished_session_pages(self, since_us: int | None, max_pages: int, first_page) -> Iterator[list[dict]]:
        """Pages of tarsy-bot's session list (its ``SessionOverview`` items), finished
        sessions only, newest first, from ``first_page`` (the answer of ``first_page``) on.
        Newest first, so that sessions added while paging push older ones to later pages
        (seen twice at worst, never skipped)."""
        return list_pages(
            self.client,
            LIST_PATH,
            lambda page: self._params(page, since_us),
            first_page=first_page,
            max_pages=max_pages,
            kind="tarsy-bot's session list",
        )

    def _page(self, page: int, since_us: int | None):
        return self.client.get_json(LIST_PATH, self._params(page, since_us))

    @staticmethod
    def _params(page: int, since_us: int | None) -> dict:
        params = {
            "status": FINISHED_STATUSES,  # repeated: status=completed&status=failed&...
            "page": page,
            "page_size": PAGE_SIZE,
            "sort_by": "started_at_us",
            "sort_order": "desc",
        }
        if since_us is not None:
            params["start_date_us"] = since_us
        return params

    @staticmethod
    def entry_id(entry) -> str | None:
        """The entry's session_id in canonical form, or None."""
        try:
            return str(uuid.UUID(entry["session_id"]))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    @staticmethod
    def fingerprint(entry: dict) -> tuple:
        """What, when it changes, means the session must be fetched again."""
        return (entry.get("status"), entry.get("completed_at_us"), entry.get("chat_message_count"))

    @staticmethod
    def synced_fingerprint(row: TarsySyncedSession) -> tuple:
        return (row.status, row.completed_at_us, row.chat_message_count)

    @staticmethod
    def cursor(entry: dict, document: dict | None) -> dict:
        """What the sync remembers of a fetched session: the document's status and completion
        time (at least as new as the list's) if it was stored, else the list's."""
        seen = document if document is not None else entry
        return {
            "status": str(seen.get("status"))[:32],
            "completed_at_us": _int_or_none(seen.get("completed_at_us")),
            "chat_message_count": _int_or_none(entry.get("chat_message_count")),
        }

    def fetch(self, session_id: str, entry: dict):
        """The session's document (``TarsyNotFound`` when it was deleted meanwhile)."""
        return self.client.get_json(f"{LIST_PATH}/{session_id}")

    @staticmethod
    def document_id(document) -> str | None:
        return TarsyBotApi.entry_id(document) if isinstance(document, dict) else None


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63 else None
