"""scoring/criteria/services.py: a version's life (draft, candidate, current, retired), one
current version per scope, promotion and rollback recorded with who, when and why."""

import pytest
from django.db import IntegrityError, transaction

from scoring.criteria import corrections, selectors, services
from scoring.criteria.services import CriteriaError
from scoring.judge.prompts import PROMPT_HASH, SHIPPED_CRITERIA, Criteria
from scoring.models import CriteriaAction, CriteriaChange, CriteriaState, CriteriaVersion
from tests.support.criteria import corrected, criteria_text, make_current

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_criteria")]


def shipped_version() -> CriteriaVersion:
    return CriteriaVersion.objects.get(prompt_hash=PROMPT_HASH, scope="global")


def test_the_shipped_criteria_are_the_current_global_version():
    version = shipped_version()

    assert version.state == CriteriaState.CURRENT
    assert (version.score_prompt, version.followup_prompt, version.system_prompt) == (
        SHIPPED_CRITERIA.score_prompt,
        SHIPPED_CRITERIA.followup_prompt,
        "",
    )


def test_a_draft_is_stored_under_its_own_hash_and_its_creation_recorded():
    criteria = criteria_text("Lenient")

    draft = services.create_draft(criteria, scope="chain", scope_value="k8s-chain", created_by="carol")

    assert (draft.state, draft.prompt_hash, draft.scope_label) == (
        "draft",
        criteria.prompt_hash,
        "Chain k8s-chain",
    )
    change = CriteriaChange.objects.get(version=draft)
    assert (change.action, change.changed_by) == (CriteriaAction.CREATE, "carol")


@pytest.mark.parametrize(
    ("criteria", "scope", "scope_value", "problem"),
    [
        (Criteria("No session here.", "Tools?"), "global", "", "no {{SESSION_CONVERSATION}} placeholder"),
        (Criteria("{{SESSION_CONVERSATION}}", " "), "global", "", "The follow-up prompt is empty."),
        (
            Criteria("{{SESSION_CONVERSATION}}", "Tools for {{ALERT_DATA}}?"),
            "global",
            "",
            "The follow-up prompt has a placeholder",
        ),
        (
            Criteria("{{SESSION_CONVERSATION}}", "Tools?", "a\x00b"),
            "global",
            "",
            "The system prompt has a NUL character.",
        ),
        (criteria_text("A"), "global", "k8s", "the global scope names no alert type or chain"),
        (criteria_text("A"), "chain", "", "scope_value: name the chain"),
        (criteria_text("A"), "team", "x", "scope: must be one of global, alert_type, chain"),
    ],
)
def test_a_draft_that_cannot_judge_is_refused_saying_why(criteria, scope, scope_value, problem):
    with pytest.raises(CriteriaError) as refused:
        services.create_draft(criteria, scope=scope, scope_value=scope_value, created_by="carol")

    assert problem in str(refused.value)
    assert not CriteriaVersion.objects.exclude(prompt_hash=PROMPT_HASH).exists()


def test_texts_that_keep_another_versions_hash_by_moving_text_between_the_prompts_are_refused():
    # EP-0028's hash joins the two prompts with nothing between them.
    moved = Criteria(
        score_prompt=SHIPPED_CRITERIA.score_prompt + SHIPPED_CRITERIA.followup_prompt[:40],
        followup_prompt=SHIPPED_CRITERIA.followup_prompt[40:],
    )
    assert moved.prompt_hash == PROMPT_HASH

    with pytest.raises(CriteriaError, match=r"have the hash of version \d+ .* with other texts"):
        services.create_draft(moved, scope="global", created_by="carol")
    draft = services.create_draft(criteria_text("First"), scope="chain", scope_value="k8s", created_by="carol")
    with pytest.raises(CriteriaError, match="with other texts"):
        services.edit_draft(draft.pk, moved, description="", edited_by="carol")

    same = services.create_draft(SHIPPED_CRITERIA, scope="chain", scope_value="k8s", created_by="carol")
    assert same.prompt_hash == PROMPT_HASH  # the same texts for another scope share the hash
    assert selectors.criteria_of_hash(PROMPT_HASH) == SHIPPED_CRITERIA


def test_only_a_draft_changes_its_texts():
    draft = services.create_draft(criteria_text("First"), scope="global", created_by="carol")

    edited = services.edit_draft(draft.pk, criteria_text("Second"), description="stricter", edited_by="dave")
    assert (edited.prompt_hash, edited.description) == (criteria_text("Second").prompt_hash, "stricter")

    services.make_candidate(draft.pk, changed_by="dave")
    with pytest.raises(CriteriaError, match="only a draft's texts can change"):
        services.edit_draft(draft.pk, criteria_text("Third"), description="", edited_by="dave")
    assert CriteriaVersion.objects.get(pk=draft.pk).prompt_hash == criteria_text("Second").prompt_hash


def test_promoting_a_candidate_retires_the_current_version_of_its_scope_and_records_who_when_why():
    version = make_current("Stricter")

    assert CriteriaVersion.objects.get(pk=version.pk).state == CriteriaState.CURRENT
    assert shipped_version().state == CriteriaState.RETIRED
    change = CriteriaChange.objects.filter(action=CriteriaAction.PROMOTE).get()
    assert (change.version, change.replaced, change.changed_by, change.reason) == (
        version,
        shipped_version(),
        "carol",
        "Stricter judges better",
    )
    assert change.changed_at is not None


def test_a_version_of_another_scope_leaves_the_global_one_current():
    make_current("Chain", scope="chain", scope_value="k8s-chain")

    assert shipped_version().state == CriteriaState.CURRENT


@pytest.mark.parametrize("state", ["draft", "retired"])
def test_only_a_candidate_is_promoted(state):
    version = services.create_draft(criteria_text("A"), scope="global", created_by="carol")
    if state == "retired":
        services.retire(version.pk, changed_by="carol", reason="not needed")

    with pytest.raises(CriteriaError, match="only a candidate is promoted"):
        services.promote(version.pk, changed_by="carol", reason="try")
    assert shipped_version().state == CriteriaState.CURRENT


def test_promotion_and_rollback_ask_why():
    version = services.make_candidate(
        services.create_draft(criteria_text("A"), scope="global", created_by="carol").pk, changed_by="carol"
    )

    with pytest.raises(CriteriaError, match="reason: say why"):
        services.promote(version.pk, changed_by="carol", reason=" ")
    with pytest.raises(CriteriaError, match="reason: say why"):
        services.rollback(scope="global", changed_by="carol", reason="")


def test_rollback_restores_the_version_each_promotion_replaced_in_turn():
    second = make_current("Second")
    third = make_current("Third")

    change = services.rollback(scope="global", changed_by="erin", reason="Third scores everyone 90")
    assert (change.version, change.restored, change.action) == (third, second, CriteriaAction.ROLLBACK)
    assert selectors.current_version("global", "") == second

    services.rollback(scope="global", changed_by="erin", reason="back to the shipped ones")
    assert selectors.current_version("global", "") == shipped_version()
    assert CriteriaVersion.objects.get(pk=third.pk).state == CriteriaState.RETIRED

    with pytest.raises(CriteriaError, match="nothing to roll back to"):
        services.rollback(scope="global", changed_by="erin", reason="once more")
    assert selectors.current_version("global", "") == shipped_version()


def test_rolling_back_a_scopes_first_version_leaves_its_sessions_to_the_wider_scope():
    chain = make_current("Chain", scope="chain", scope_value="k8s-chain")

    change = services.rollback(scope="chain", scope_value="k8s-chain", changed_by="erin", reason="too strict")

    assert (change.version, change.restored) == (chain, None)
    assert selectors.current_version("chain", "k8s-chain") is None
    assert selectors.current_criteria().hash_for("any", "k8s-chain") == PROMPT_HASH


def test_a_scope_without_a_current_version_has_nothing_to_roll_back():
    with pytest.raises(CriteriaError, match="the scope chain k8s-chain has no current version"):
        services.rollback(scope="chain", scope_value="k8s-chain", changed_by="erin", reason="why not")


def test_a_current_version_is_not_retired_but_replaced_or_rolled_back():
    with pytest.raises(CriteriaError, match="only a draft or a candidate is retired"):
        services.retire(shipped_version().pk, changed_by="erin", reason="tidy")


def test_the_database_holds_one_current_version_per_scope():
    duplicate = CriteriaVersion(
        **{
            field: getattr(shipped_version(), field)
            for field in ("prompt_hash", "score_prompt", "followup_prompt")
        },
        state=CriteriaState.CURRENT,
        created_by="someone",
    )

    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_the_database_refuses_a_scope_without_its_value():
    with pytest.raises(IntegrityError), transaction.atomic():
        CriteriaVersion.objects.create(
            prompt_hash="a" * 64,
            score_prompt="x",
            followup_prompt="y",
            scope="chain",
            scope_value="",
            created_by="x",
        )


# --- Calibration: a candidate carrying reviewers' corrections as worked examples ------------


def test_a_calibrated_candidate_carries_the_chosen_corrections_under_a_hash_of_its_own():
    first = corrected(90, 20, alert_type="kubernetes", note="Never read the pod logs.")
    second = corrected(30, 70, alert_type="database", note="The replica lag was checked properly.")
    base = shipped_version()

    version = services.build_calibrated_candidate(base.pk, size=2, created_by="carol")

    assert (version.state, version.scope, version.created_by) == ("candidate", "global", "carol")
    examples = [(e["session_id"], e["judge_score"], e["reviewer_score"], e["note"]) for e in version.examples]
    assert examples == [
        (str(first.session_id), 90, 20, "Never read the pod logs."),
        (str(second.session_id), 30, 70, "The replica lag was checked properly."),
    ]
    criteria = selectors.criteria_of(version)
    assert version.prompt_hash == criteria.prompt_hash != PROMPT_HASH
    assert criteria.followup_prompt == base.followup_prompt
    # The examples' place: before the session data, the rest of the base's text as it was.
    assert criteria.score_prompt.replace("{{CALIBRATION_EXAMPLES}}\n\n", "") == base.score_prompt
    placed = criteria.score_prompt.index("{{CALIBRATION_EXAMPLES}}")
    assert placed < criteria.score_prompt.index("## SESSION DATA")
    assert selectors.criteria_of_hash(version.prompt_hash) == criteria  # read back whole, examples too
    assert [c.action for c in CriteriaChange.objects.filter(version=version).order_by("id")] == [
        CriteriaAction.CREATE, CriteriaAction.CANDIDATE,
    ]  # fmt: skip
    assert version.description.startswith(f"Calibrated from v{base.pk}: 2 reviewers' corrections")
    assert len(corrections.corrections()) == 2


def test_calibrating_a_calibrated_version_replaces_its_examples_and_keeps_its_scope():
    corrected(90, 20)
    chain = services.create_draft(
        criteria_text("Chain"), scope="chain", scope_value="k8s-chain", created_by="carol"
    )
    once = services.build_calibrated_candidate(chain.pk, created_by="carol")
    corrected(10, 90, alert_type="database")

    twice = services.build_calibrated_candidate(once.pk, created_by="carol")

    assert (twice.scope, twice.scope_value) == ("chain", "k8s-chain")
    assert (len(once.examples), len(twice.examples)) == (1, 2)
    assert twice.score_prompt == once.score_prompt  # its placeholder already there: not added twice
    placed = "Chain criteria.\n{{CALIBRATION_EXAMPLES}}\n\n{{SESSION_CONVERSATION}}"
    assert twice.score_prompt.startswith(placed)


@pytest.mark.parametrize("size", [0, 13])
def test_calibration_refuses_a_size_out_of_range(size):
    with pytest.raises(CriteriaError, match="size: from 1 to 12 examples"):
        services.build_calibrated_candidate(shipped_version().pk, size=size, created_by="carol")


def test_calibration_without_corrections_says_there_is_nothing_to_calibrate_with():
    corrected(70, 65)  # agrees, near enough

    with pytest.raises(CriteriaError, match="no review corrects the judge"):
        services.build_calibrated_candidate(shipped_version().pk, created_by="carol")
    assert not CriteriaVersion.objects.filter(state="candidate").exists()
