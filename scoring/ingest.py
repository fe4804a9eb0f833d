"""Validation of TARSy session documents (placeholder until the ingest work lands)."""


class InvalidSession(ValueError):
    def __init__(self, errors: dict):
        super().__init__(errors)
        self.errors = errors


def parse_session(document: dict) -> dict:
    raise NotImplementedError
