"""Import TARSy session documents from files, folders or stdin."""

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.core.management.base import BaseCommand, CommandError

from scoring import identities, services
from scoring.models import SessionSource
from scoring.tarsy import ingest
from scoring.tarsy.documents import InvalidSession

STDIN = "-"
SESSION_FILE_SUFFIXES = (".json", ".jsonl")


@dataclass
class Record:
    """One session read from a file, why it could not be read, or (``skipped``)
    why a file or folder gave no session though nothing in it is wrong.

    ``where`` names it in messages: the file, plus ``[n]`` for its position in
    a JSON list (from 0) or its line in a JSONL file (from 1).
    """

    where: str
    document: object = None
    error: str = ""
    skipped: str = ""


def read_records(path: str, stdin: BinaryIO) -> Iterator[Record]:
    """Every session in a file, a folder (its .json and .jsonl files) or stdin."""
    if path == STDIN:
        yield from _records_in(stdin.read(), "<stdin>")
        return
    location = Path(path)
    if location.is_dir():
        files = sorted(p for p in location.rglob("*") if p.is_file())
        others = [file for file in files if file.suffix not in SESSION_FILE_SUFFIXES]
        for file in files:
            if file.suffix in SESSION_FILE_SUFFIXES:
                yield from _records_in(file.read_bytes(), str(file), jsonl=file.suffix == ".jsonl")
        if others:
            yield Record(path, skipped=_other_files(others, location))
        if len(others) == len(files):
            yield Record(path, skipped="no .json or .jsonl files in this folder")
    elif location.is_file():
        yield from _records_in(location.read_bytes(), path, jsonl=location.suffix == ".jsonl")
    else:
        yield Record(path, error="no such file or folder")


# A skipped-files message names this many of them, then counts the rest.
MAX_NAMED_FILES = 5


def _other_files(others: list[Path], folder: Path) -> str:
    names = ", ".join(str(file.relative_to(folder)) for file in others[:MAX_NAMED_FILES])
    if len(others) > MAX_NAMED_FILES:
        names += f" and {len(others) - MAX_NAMED_FILES} more"
    files = "file" if len(others) == 1 else "files"
    return f"{len(others)} {files} not read (only .json and .jsonl files are): {names}"


def _records_in(content: bytes, name: str, *, jsonl: bool = False) -> Iterator[Record]:
    """Sessions in JSON (one session or a list) or JSONL; other files are JSON unless they read as JSONL.
    A file that holds no session (an empty list, a JSONL file of blank lines) says so."""
    records = _parsed_records(content, name, jsonl=jsonl)
    first = next(records, None)
    if first is None:
        yield Record(name, skipped="holds no sessions (an empty list or no lines)")
        return
    yield first
    yield from records


def _parsed_records(content: bytes, name: str, *, jsonl: bool) -> Iterator[Record]:
    if not jsonl:
        try:
            data = json.loads(content)
        except ValueError as exc:
            # "Extra data" after a complete first value: one value per line.
            if not (isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data"):
                if content.lstrip().startswith(b"["):
                    yield from _salvage_list(content, name, exc)
                else:
                    yield Record(name, error=_not_json(exc))
                return
        else:
            if isinstance(data, list):
                yield from (Record(f"{name}[{index}]", item) for index, item in enumerate(data))
            else:
                yield Record(name, data)
            return
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield Record(f"{name}[{number}]", json.loads(line))
        except ValueError as exc:
            yield Record(f"{name}[{number}]", error=_not_json(exc))


def _salvage_list(content: bytes, name: str, error: ValueError) -> Iterator[Record]:
    """The complete sessions at the start of a JSON list that is cut short or
    broken part-way (an interrupted export), then one rejection for the rest."""
    decoder = json.JSONDecoder()
    text = content.decode("utf-8", errors="replace")
    position = text.index("[") + 1
    index = 0
    while True:
        position = _after_whitespace(text, position)
        if index and text.startswith(",", position):
            position = _after_whitespace(text, position + 1)
        try:
            item, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        yield Record(f"{name}[{index}]", item)
        index += 1
    yield Record(f"{name}[{index}]", error=f"{_not_json(error)} (the list is cut short or broken from here on)")


def _after_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _not_json(exc: ValueError) -> str:
    return f"not valid JSON: {exc}"


class Command(BaseCommand):
    help = (
        "Import TARSy sessions from JSON files "
        "(one session or a list), JSONL files (one session per line), folders (their .json and .jsonl "
        "files, recursively) or '-' for stdin. Each session is stored on its own: a rejected one is "
        "reported as 'rejected: FILE[N]: REASON' (N = position in the list from 0, or line number in "
        "JSONL) and the others are stored all the same; what had to change to store a session (NUL "
        "characters replaced) is reported as 'noted: FILE[N]: NOTE'; a session stored before with the same "
        "content is left as it was and counted as unchanged. Files of a folder that are not .json or .jsonl, "
        "and files that hold no session, are reported as 'skipped: WHERE: WHY'. Exits non-zero if "
        "anything was rejected. A session is a tarsy-bot document (as its GET /api/v1/history/sessions/{id} "
        "returns it) or a Go TARSy document (docs/sync.md, 'The Go TARSy document'); the last line counts "
        "the sessions read of each source; with -v 2, each session read is listed as "
        "'OUTCOME: FILE[N]: SOURCE session ID'."
    )
    # Lets tests hand in their own stdin (a binary stream) through call_command.
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH", help="a .json or .jsonl file, a folder, or -")

    def handle(self, *args, paths, **options):
        stdin = options.get("stdin") or sys.stdin.buffer
        counts = {"unchanged": 0, "created": 0, "updated": 0, "rejected": 0}
        sources = dict.fromkeys(SessionSource.values, 0)
        for path in paths:
            for record in read_records(path, stdin):
                if record.skipped:
                    self.stderr.write(f"skipped: {record.where}: {record.skipped}")
                    continue
                source = ingest.source_of(record.document) if not record.error else None
                if source is not None:
                    sources[source] += 1
                reason = record.error or self._store(record, counts, source, verbose=options["verbosity"] > 1)
                if reason:
                    counts["rejected"] += 1
                    self.stderr.write(f"rejected: {record.where}: {reason}")
        self.stdout.write(
            ", ".join(f"{outcome}: {count}" for outcome, count in counts.items())
            + "; "
            + ", ".join(f"{source}: {count}" for source, count in sources.items())
        )
        if counts["rejected"]:
            stored = counts["unchanged"] + counts["created"] + counts["updated"]
            raise CommandError(f"{counts['rejected']} rejected, {stored} stored")

    def _store(self, record: Record, counts: dict, source: str, *, verbose: bool) -> str:
        """Store one session, count it and show what had to change to store it (and, verbose,
        which source it is and what storing it did); return why it was rejected, if it was."""
        try:
            session, outcome = services.ingest_session(
                record.document, written_by=f"{identities.IMPORT_WRITE}{record.where}"
            )
        except InvalidSession as exc:
            return f"({source}) {exc}" if verbose else str(exc)
        counts[outcome.value] += 1
        if verbose:
            self.stdout.write(f"{outcome.value}: {record.where}: {source} session {session.session_id}")
        for note in session.ingest_notes:
            self.stdout.write(f"noted: {record.where}: {note}")
        return ""
