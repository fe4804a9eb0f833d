"""The bundled sample sessions (``scoring/samples/``, which ``bin/run`` imports), by source:
tarsy-bot history documents and Go TARSy "tarsy-go/1" documents."""

import json
from functools import cache
from pathlib import Path

from scoring.models import AlertSession
from scoring.tarsy import ingest
from scoring.tarsy_go.document import is_document
from tests.support.servers import REPO_DIR

SAMPLES_DIR = REPO_DIR / "scoring" / "samples"
SAMPLES = sorted(SAMPLES_DIR.glob("*.json"))


@cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load(path: Path) -> dict:
    """A sample's document (a fresh copy: callers may change it)."""
    return json.loads(_text(path))


TARSY_GO_SAMPLES = [path for path in SAMPLES if is_document(load(path))]
TARSY_BOT_SAMPLES = [path for path in SAMPLES if path not in TARSY_GO_SAMPLES]


def unsaved_session(document: dict) -> AlertSession:
    """An unsaved session of a document of either source, its fields as an import stores them."""
    return AlertSession(**ingest.parse_document(document))
