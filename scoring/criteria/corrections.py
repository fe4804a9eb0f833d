"""Reads for calibration (docs/criteria.md, "Calibration"): the reviews where a reviewer
corrected the judge, and the few of them a calibrated version carries as worked examples.

A *correction* is a reviewer's newest review of a completed score whose own score differs from
the judge's by at least ``MIN_CORRECTION`` points and which says why (a note). Go TARSy's
reviewers rate a session without a score of theirs, so their verdicts correct no score here.
"""

from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from scoring.judge import fitting
from scoring.judge.parts import Cuttable
from scoring.judge.prompts import CalibrationExample
from scoring.judge.rendering import render_investigation_parts
from scoring.models import REVIEW_NOTE_MAX_CHARS, AlertSession, ScoreReview, ScoringStatus
from scoring.selectors import SCORE_BANDS, band_of

# A reviewer's score must differ from the judge's by this many points to be a correction.
MIN_CORRECTION = 15
# Examples a calibrated version carries unless the operator asks for another number, and the most.
DEFAULT_EXAMPLES = 6
MAX_EXAMPLES = 12
# An example's excerpt of the investigation, and its note, are cut to these many characters.
EXCERPT_CHARS = 2_000
NOTE_CHARS = 1_000
assert NOTE_CHARS <= REVIEW_NOTE_MAX_CHARS


@dataclass(frozen=True)
class Correction:
    review_id: int
    session_id: str
    alert_type: str
    judge_score: int
    reviewer_score: int
    note: str

    @property
    def size(self) -> int:
        return abs(self.reviewer_score - self.judge_score)


def corrections() -> list[Correction]:
    """Every correction, largest first (then newest review first)."""
    later = ScoreReview.objects.filter(
        score=OuterRef("score"), reviewer=OuterRef("reviewer"), id__gt=OuterRef("id")
    )
    rows = (
        ScoreReview.objects.filter(score__status=ScoringStatus.COMPLETED, score__total_score__isnull=False)
        .exclude(Exists(later))
        .order_by()
        .values_list(
            "id", "score__session_id", "score__session__alert_type", "score__total_score",
            "reviewer_score", "note",
        )
    )
    found = [
        Correction(review_id, str(session_id), alert_type, judge, reviewer, note.strip())
        for review_id, session_id, alert_type, judge, reviewer, note in rows
        if abs(reviewer - judge) >= MIN_CORRECTION and note.strip()
    ]
    return sorted(found, key=lambda correction: (-correction.size, -correction.review_id))


def chosen_corrections(size: int = DEFAULT_EXAMPLES) -> list[Correction]:
    """Up to ``size`` corrections, one a session, chosen to cover the score bands (of the
    reviewer's score: where the session belongs) and the alert types: each next one is the
    largest correction of a band not yet covered, and among those of an alert type not yet
    covered; when every band and type is covered, the largest left. Deterministic: the same
    reviews give the same choice."""
    left = corrections()
    chosen: list[Correction] = []
    bands, alert_types, sessions = set(), set(), set()
    band_count = len(SCORE_BANDS)
    while left and len(chosen) < size:
        # ``left`` is largest first, and ``min`` keeps the first of equals: the largest.
        best = min(
            left,
            key=lambda c: (
                len(bands) < band_count and band_of(c.reviewer_score).key in bands,
                c.alert_type in alert_types,
            ),
        )
        chosen.append(best)
        bands.add(band_of(best.reviewer_score).key)
        alert_types.add(best.alert_type)
        sessions.add(best.session_id)
        left = [c for c in left if c.session_id not in sessions]
    return chosen


def example_of(correction: Correction) -> CalibrationExample:
    """``correction`` as a worked example: a bounded excerpt of what the judge read of its session
    (each long tool result and agent text cut as fitting cuts them at the least, then the whole to
    ``EXCERPT_CHARS``), never the session whole."""
    session = AlertSession.objects.get(pk=correction.session_id)
    parts = render_investigation_parts(session)
    glimpsed = "\n".join(
        fitting.excerpt(part, fitting.KEEP_LEAST_CHARS, part.label) if isinstance(part, Cuttable) else part
        for part in parts
    )
    return CalibrationExample(
        session_id=correction.session_id,
        alert_type=correction.alert_type,
        judge_score=correction.judge_score,
        reviewer_score=correction.reviewer_score,
        note=fitting.excerpt(correction.note, NOTE_CHARS, "the note"),
        excerpt=fitting.excerpt(glimpsed, EXCERPT_CHARS, "the investigation"),
    )
