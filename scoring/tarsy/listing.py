"""Paging through a TARSy's session list: both generations answer ``{sessions: [...],
pagination: {total_pages, ...}}``, a page at a time."""

from collections.abc import Callable, Iterator

from scoring.tarsy.client import SyncError, TarsyClient


def list_pages(
    client: TarsyClient,
    path: str,
    params_of_page: Callable[[int], dict],
    *,
    first_page,
    max_pages: int,
    kind: str,
) -> Iterator[list[dict]]:
    """The sessions of each page of the list at ``path``, from ``first_page`` (the answer for
    page 1 when already read, else None) to the last page or ``max_pages``. ``kind`` names the
    list in messages ("tarsy-bot's session list")."""
    page = 1
    while True:
        body = first_page if page == 1 and first_page is not None else client.get_json(path, params_of_page(page))
        try:
            sessions, total_pages = body["sessions"], int(body["pagination"]["total_pages"])
        except (TypeError, KeyError, ValueError):
            raise SyncError(
                f"{client.base_url}{path} did not answer with {kind} "
                "({sessions, pagination: {total_pages, ...}}); is the URL TARSy's?"
            ) from None
        if not isinstance(sessions, list):
            raise SyncError(f"{client.base_url}{path}: 'sessions' is not a list")
        yield sessions
        if not sessions or page >= total_pages:
            return
        if page >= max_pages:
            raise SyncError(
                f"{client.base_url}{path} lists more than TARSY_SYNC_MAX_PAGES ({max_pages}) pages; "
                "the sessions of the pages read are stored"
            )
        page += 1
