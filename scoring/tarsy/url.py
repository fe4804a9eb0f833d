"""The one rule for a TARSy base URL, shared by the settings (TARSY_URL) and
``manage.py sync_sessions URL``. It imports nothing of Django: settings load it."""

import re

# No user:password@ part: the URL is shown in /metrics, logs and each session's writer.
_TARSY_URL = re.compile(r"https?://[^\s/@?#]+(/[^\s?#]*)?")


def tarsy_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be TARSy's base URL, or None if it can."""
    if _TARSY_URL.fullmatch(url):
        return None
    return (
        f"{url!r} is not an http(s) URL without credentials or query "
        "(e.g. https://tarsy.example.com; the token goes in TARSY_TOKEN or --token)"
    )
