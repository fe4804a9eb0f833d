"""A session document of either source into AlertSession field values.

Which source a document comes from is told by its shape: Go TARSy's assembled document
names its format (``scoring.tarsy_go.document``); anything else is read as tarsy-bot's
history document (``scoring.tarsy_bot.document``), whose errors then say what is wrong.
"""

from scoring.models import SessionSource
from scoring.tarsy_bot import document as tarsy_bot_document
from scoring.tarsy_go import document as tarsy_go_document


def source_of(document) -> str:
    """The source whose document ``document`` is (``SessionSource``)."""
    if tarsy_go_document.is_document(document):
        return SessionSource.TARSY_GO
    return SessionSource.TARSY_BOT


def parse_document(document) -> dict:
    """AlertSession field values (``source`` included) from one session document.

    Raises ``scoring.tarsy.documents.InvalidSession`` listing every problem found.
    """
    source = source_of(document)
    if source == SessionSource.TARSY_GO:
        fields = tarsy_go_document.parse_session(document)
    else:
        tarsy_go_document.refuse_partial_document(document)
        fields = tarsy_bot_document.parse_session(document)
    fields["source"] = source
    return fields
