"""scoring/criteria/corrections.py: which reviews correct the judge, which few of them a
calibrated version carries (covering bands and alert types, deterministically), and an
example's bounded excerpt of what the judge read."""

import uuid

import pytest

from scoring.criteria import corrections
from tests.support.criteria import corrected

pytestmark = pytest.mark.django_db


def test_a_correction_differs_by_the_margin_says_why_and_is_the_reviewers_newest_review():
    kept = corrected(80, 80 - corrections.MIN_CORRECTION, note="  Never read the logs.  ")
    corrected(80, 80 - corrections.MIN_CORRECTION + 1)  # too close to the judge
    corrected(80, 30, note=" ")  # says nothing
    larger = corrected(70, 20)
    second = corrected(50, 95, reviewer="sam")

    found = corrections.corrections()

    assert [(c.session_id, c.judge_score, c.reviewer_score, c.note) for c in found] == [
        (str(larger.session_id), 70, 20, "Missed the pod logs."),
        (str(second.session_id), 50, 95, "Missed the pod logs."),
        (str(kept.session_id), 80, 65, "Never read the logs."),
    ]


def test_a_later_review_by_the_same_reviewer_of_the_same_score_replaces_the_correction():
    score = corrected(80, 20)
    corrected_again = score.reviews.create(
        reviewer=score.reviews.get().reviewer, verdict="agree", reviewer_score=78, note="Fair after all."
    )

    assert corrected_again.pk and corrections.corrections() == []


def test_the_choice_covers_bands_and_alert_types_before_the_largest_corrections():
    # The reviewer's score places each: poor (0-49), weak (50-74), good (75-100).
    big_poor_k8s = corrected(90, 10, alert_type="kubernetes")
    poor_k8s = corrected(95, 20, alert_type="kubernetes")  # poor again, same type: after the others
    good_k8s = corrected(40, 80, alert_type="kubernetes")
    weak_db = corrected(90, 60, alert_type="database")
    poor_net = corrected(70, 40, alert_type="network")

    chosen = corrections.chosen_corrections(5)

    # Largest first; then the weak band (and a new type), the good band, a new type, the rest.
    assert [c.session_id for c in chosen] == [
        str(s.session_id) for s in (big_poor_k8s, weak_db, good_k8s, poor_net, poor_k8s)
    ]
    assert [c.session_id for c in corrections.chosen_corrections(2)] == [
        str(s.session_id) for s in (big_poor_k8s, weak_db)
    ]
    assert chosen == corrections.chosen_corrections(5)  # the same reviews, the same choice


def test_a_session_gives_one_example_however_many_reviewers_corrected_it():
    score = corrected(90, 10)
    corrected_by_sam = score.reviews.create(
        reviewer=type(score.reviews.get().reviewer).objects.create(username="sam"),
        verdict="disagree",
        reviewer_score=30,
        note="Weak.",
    )

    chosen = corrections.chosen_corrections(6)

    assert corrected_by_sam.pk and len(corrections.corrections()) == 2
    assert [(c.session_id, c.reviewer_score) for c in chosen] == [(str(score.session_id), 10)]


def test_an_example_holds_a_bounded_excerpt_of_what_the_judge_read_never_the_session_whole():
    analysis = "Root cause: orphaned finalizer.\n" + "x" * 300_000 + "\nEND OF ANALYSIS"
    score = corrected(85, 30, note="n" * 5_000, final_analysis=analysis, alert_type="kubernetes")

    [correction] = corrections.chosen_corrections()
    example = corrections.example_of(correction)

    assert uuid.UUID(example.session_id) == score.session_id
    assert (example.alert_type, example.judge_score, example.reviewer_score) == ("kubernetes", 85, 30)
    assert len(example.excerpt) < corrections.EXCERPT_CHARS + 100  # the marker says what was left out
    assert "of the investigation omitted" in example.excerpt
    assert example.excerpt.rstrip().endswith("END OF ANALYSIS")
    assert example.excerpt.startswith("## SESSION")  # the investigation as rendered for the judge
    assert len(example.note) < corrections.NOTE_CHARS + 100 and "of the note omitted" in example.note
