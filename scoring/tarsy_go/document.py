"""Go TARSy's session document (placeholder)."""

FORMAT = "tarsy-go/1"


def is_document(document) -> bool:
    return isinstance(document, dict) and document.get("format") == FORMAT


def refuse_partial_document(document) -> None:
    return None


def parse_session(document) -> dict:
    raise NotImplementedError
