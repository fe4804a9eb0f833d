"""What a trial's pages show (the dashboard's trial page and the trial's admin page render it
with the same partial, ``scoring/_trial_results.html``): the trial, its progress, its figures
laid out one row per agreement figure, and its scorings. Reads only."""

from django.db.models import BooleanField, ExpressionWrapper, Q

from scoring.models import Trial, TrialArm
from scoring.selectors import SCORE_BANDS
from scoring.trials import selectors

# Each agreement figure of ``selectors.results``: its name there, how it is labelled, the
# digits it is shown with, and which way is better.
FIGURES = (
    ("mean_abs_diff", "Mean |difference| from the reviewers", 1, "lower"),
    ("spearman_rho", "Spearman ρ with the reviewers", 2, "higher"),
    ("weighted_kappa", "Weighted κ of the bands", 2, "higher"),
)


def figure_rows(results: dict) -> list[dict]:
    """One row per agreement figure: each arm's value and 95 % interval, the paired difference
    (candidate − current) and whether it is significant, how many sessions it counts, and why
    it is withheld when it is."""
    rows = []
    for name, label, digits, better in FIGURES:
        rows.append(
            {
                "name": name,
                "label": label,
                "digits": digits,
                "better": better,
                "n": results["n"][name],
                "reason": results["reason"].get(name),
                "arms": [
                    {"arm": arm, "value": figures[name], "ci": figures[f"{name}_ci"]}
                    for arm, figures in results["arms"].items()
                ],
                "difference": results["differences"].get(name),
            }
        )
    return rows


def confusion_tables(results: dict) -> list[dict]:
    """Each arm's bands (rows) against the reviewers' bands (columns, in ``SCORE_BANDS`` order)."""
    labels = {band.key: band.label for band in SCORE_BANDS}
    return [
        {
            "arm": arm,
            "rows": [
                {
                    "band": row["row"],
                    "label": labels[row["row"]],
                    "cells": [{"band": band.label, "count": row["counts"][band.key]} for band in SCORE_BANDS],
                }
                for row in figures["confusion"]
            ],
        }
        for arm, figures in results["arms"].items()
    ]


def scorings_with_transcript_flag(trial: Trial):
    """The trial's scorings (without their transcripts), with whether each keeps one."""
    return selectors.scorings(trial).annotate(
        has_transcript=ExpressionWrapper(Q(transcript__isnull=False), output_field=BooleanField())
    )


def trial_context(trial: Trial) -> dict:
    """Everything ``scoring/_trial_results.html`` shows of ``trial``."""
    results = selectors.results(trial)
    progress = selectors.progress(trial)
    return {
        "trial": trial,
        "progress": progress,
        "sessions_drawn": progress["total"] // len(TrialArm.values),
        "results": results,
        "figure_rows": figure_rows(results),
        "withheld": sorted(set(results["reason"].values())),
        "confusion_tables": confusion_tables(results),
        "bands": SCORE_BANDS,
        "scorings": list(scorings_with_transcript_flag(trial)),
    }
