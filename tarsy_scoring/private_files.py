"""Files of secrets generated once per install (the SECRET_KEY, bin/run's admin password).

Imported by the settings and by bin/run before Django is set up: it imports
nothing from Django.
"""

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def read_or_create(path: Path, make: Callable[[], str]) -> tuple[str, bool]:
    """The content of ``path``; if it is missing or empty, ``make()``'s, written there first.
    Returns (content, whether this call wrote it).

    The content is written whole to a file of the same folder that is private
    (0600) from its creation, then put in place: the secret is never readable by
    others nor seen half-written. A missing file is created by a hard link, which
    fails if another process got there first: processes starting at once all read
    the first one's. An empty file (made by hand, maybe with wider permissions)
    is replaced.
    """
    try:
        content = path.read_text().strip()
    except FileNotFoundError:
        content = ""
    if content:
        return content, False
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(make())
    try:
        try:
            os.link(draft, path)
            written = True
        except FileExistsError:
            # Another process's secret (keep it), or an empty file made by hand (replace it).
            written = not path.read_text().strip()
            if written:
                os.replace(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return path.read_text().strip(), written
