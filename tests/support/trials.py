"""Trials for the tests: candidate versions, reviewed sessions, a fake judge that scores by the
criteria it was sent, and trial scorings run as a worker's dispatcher runs them."""

import re

from scoring.criteria import services as criteria_services
from scoring.trials import services as trials
from tests.support.criteria import corrected, criteria_text
from tests.support.fake_llm import Reply
from tests.support.judge_replies import evaluated


def candidate(name="Candidate", scope="global", scope_value=""):
    version = criteria_services.create_draft(
        criteria_text(name), scope=scope, scope_value=scope_value, created_by="carol"
    )
    return criteria_services.make_candidate(version.pk, changed_by="carol")


def reviewed(reviewer_score: int, judge_total: int = 60, **session):
    """A session whose score (by ``judge_total``) a reviewer scored ``reviewer_score``."""
    return corrected(judge_total, reviewer_score, **session).session


def scripted_judge(judge_llm, candidate_total, current_total):
    """The fake judge scores by the criteria it was sent: the candidate's prompt ("Candidate
    criteria.") gets ``candidate_total(prompt)``, the shipped one ``current_total(prompt)``;
    turn 2 names a tool."""

    def reply(body):
        messages = body["messages"]
        if messages[-2:-1] and messages[-2]["role"] == "assistant":
            return Reply("1. **kubectl-logs** - the logs were never read.")
        prompt = messages[-1]["content"]
        total = candidate_total if prompt.startswith("Candidate criteria.") else current_total
        return Reply(evaluated(f"{total(prompt)}"))

    judge_llm.set_default(reply)


def reference_in(prompt: str) -> int:
    """The reviewer's score a session of ``marked`` carries in its alert."""
    return int(re.search(r"REF-(\d+)", prompt).group(1))


def marked(reviewer_score: int):
    return reviewed(reviewer_score, judge_total=50, alert_data={"note": f"REF-{reviewer_score}"})


def run_all(limit=50):
    """Claim and run every due trial scoring, as workers' dispatchers do."""
    ran = 0
    while claimed := trials.claim_pending_trial_scorings(limit):
        for scoring in claimed:
            trials.run_claimed_trial_scoring(scoring)
            ran += 1
    return ran
