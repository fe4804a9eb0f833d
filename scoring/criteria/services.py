"""Writes of the criteria versions: drafts, candidates, promotion, rollback, retirement, each
recorded with who, when and why (docs/criteria.md)."""

import dataclasses

from django.db import IntegrityError, transaction

from scoring.criteria import corrections, selectors
from scoring.judge.prompts import EXAMPLES_PLACEHOLDER, Criteria, criteria_problems
from scoring.models import CriteriaAction, CriteriaChange, CriteriaScope, CriteriaState, CriteriaVersion


class CriteriaError(ValueError):
    """A change the criteria versions refuse, with what is wrong, one sentence a problem."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else problems
        super().__init__(" ".join(self.problems))


class CriteriaConflict(CriteriaError):
    """Refused for the state a version or scope is in (not for what was asked): a draft to
    promote, a current version to retire, a scope with nothing to roll back to."""


CRITERIA_PERMISSION = "scoring.change_criteria"


def can_change_criteria(user) -> bool:
    """Whether ``user`` may create, edit, promote, roll back and retire criteria versions: an
    active staff member, or an active user with the ``change_criteria`` permission."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return user.is_staff or user.has_perm(CRITERIA_PERMISSION)


def typed_text(text: str) -> str:
    """A prompt as typed in a browser's text box, which sends its line breaks as CRLF: with the
    line breaks the person typed (LF), so that it hashes as the same text given any other way."""
    return text.replace("\r\n", "\n")


def criteria_from_files(*, score: bytes, followup: bytes, system: bytes | None = None) -> Criteria:
    """Criteria from the contents of text files (UTF-8): line breaks read as LF whatever the
    system that saved them, and one final line break dropped, which editors add and a prompt does
    not mean (the shipped prompts end without one). Raises ``CriteriaError`` for a file that is
    not UTF-8."""
    texts = {}
    for name, data in (("score", score), ("followup", followup), ("system", system or b"")):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CriteriaError(f"The {name} file is not UTF-8 text (byte {exc.start}).") from None
        texts[name] = typed_text(text).removesuffix("\n")
    return Criteria(
        score_prompt=texts["score"], followup_prompt=texts["followup"], system_prompt=texts["system"]
    )


def parse_scope(text: str) -> tuple[str, str]:
    """``global``, ``alert_type:NAME`` or ``chain:NAME`` as (scope, scope_value); the scope is
    checked when it is used (``scope_problems``)."""
    scope, _, value = text.partition(":")
    return scope.strip(), value.strip()


def scope_problems(scope: str, scope_value: str) -> list[str]:
    if scope not in CriteriaScope.values:
        return [f"scope: must be one of {', '.join(CriteriaScope.values)}, not {scope!r}."]
    if scope == CriteriaScope.GLOBAL and scope_value:
        return ["scope_value: the global scope names no alert type or chain; leave it empty."]
    if scope != CriteriaScope.GLOBAL and not scope_value.strip():
        return [f"scope_value: name the {CriteriaScope(scope).label.lower()} these criteria judge."]
    if len(scope_value) > 255:
        return ["scope_value: at most 255 characters."]
    return []


def create_draft(
    criteria: Criteria, *, scope: str, scope_value: str = "", description: str = "", created_by: str
) -> CriteriaVersion:
    """A new draft holding ``criteria``, for ``scope``. Raises ``CriteriaError`` saying what is
    wrong with the texts or the scope."""
    problems = criteria_problems(criteria) + scope_problems(scope, scope_value)
    if problems:
        raise CriteriaError(problems)
    with transaction.atomic():
        _refuse_hash_of_other_texts(criteria, version_id=None)
        version = CriteriaVersion.objects.create(
            **_texts(criteria),
            description=description,
            scope=scope,
            scope_value=scope_value,
            created_by=created_by[:255],
        )
        _record(version, CriteriaAction.CREATE, created_by, "")
    return version


def edit_draft(version_id: int, criteria: Criteria, *, description: str, edited_by: str) -> CriteriaVersion:
    """Replace a draft's texts and description. Only a draft changes: a draft never scores, so
    no score's hash loses its texts."""
    problems = criteria_problems(criteria)
    if problems:
        raise CriteriaError(problems)
    with transaction.atomic():
        version = _locked(version_id)
        if version.state != CriteriaState.DRAFT:
            raise CriteriaConflict(
                f"version {version.pk} is {version.state}: only a draft's texts can change."
            )
        _refuse_hash_of_other_texts(criteria, version_id=version.pk)
        for name, value in _texts(criteria).items():
            setattr(version, name, value)
        version.description = description
        version.save()
        _record(version, CriteriaAction.EDIT, edited_by, "")
    return version


def make_candidate(version_id: int, *, changed_by: str, reason: str = "") -> CriteriaVersion:
    """Freeze a draft's texts: it becomes a candidate, ready to be tried and promoted."""
    return _move(
        version_id, CriteriaState.DRAFT, CriteriaState.CANDIDATE, CriteriaAction.CANDIDATE, changed_by, reason
    )


def retire(version_id: int, *, changed_by: str, reason: str) -> CriteriaVersion:
    """Set a draft or candidate aside. A current version leaves only by a promotion or a rollback."""
    with transaction.atomic():
        version = _locked(version_id)
        if version.state not in (CriteriaState.DRAFT, CriteriaState.CANDIDATE):
            raise CriteriaConflict(
                f"version {version.pk} is {version.state}: only a draft or a candidate is retired; "
                "a current version is replaced by promoting another, or rolled back."
            )
        version.state = CriteriaState.RETIRED
        version.save(update_fields=["state", "updated_at"])
        _record(version, CriteriaAction.RETIRE, changed_by, reason)
    return version


def promote(version_id: int, *, changed_by: str, reason: str) -> CriteriaVersion:
    """Make a candidate the current version of its scope; the one it replaces is retired.
    From then on, sessions of that scope are judged by it and older scores of them are obsolete."""
    _require_reason(reason)
    try:
        with transaction.atomic():
            version = _locked(version_id)
            if version.state != CriteriaState.CANDIDATE:
                raise CriteriaConflict(
                    f"version {version.pk} is {version.state}: only a candidate is promoted."
                )
            replaced = _current_locked(version.scope, version.scope_value)
            if replaced is not None:
                replaced.state = CriteriaState.RETIRED
                replaced.save(update_fields=["state", "updated_at"])
            version.state = CriteriaState.CURRENT
            version.save(update_fields=["state", "updated_at"])
            _record(version, CriteriaAction.PROMOTE, changed_by, reason, replaced=replaced)
    except IntegrityError:  # another promotion in the scope committed first
        raise CriteriaConflict(f"the scope {version.scope_label} changed meanwhile; try again.") from None
    return version


def rollback(*, scope: str, scope_value: str = "", changed_by: str, reason: str) -> CriteriaChange:
    """Retire the scope's current version and make current again the one its promotion
    replaced. A scope other than global whose version replaced none is left without one (its
    sessions fall back to the wider scope); the global scope always keeps one."""
    _require_reason(reason)
    problems = scope_problems(scope, scope_value)
    if problems:
        raise CriteriaError(problems)
    with transaction.atomic():
        current = _current_locked(scope, scope_value)
        if current is None:
            named = f"{scope} {scope_value}" if scope_value else scope
            raise CriteriaConflict(f"the scope {named} has no current version to roll back.")
        restored = selectors.replaced_by_promotion(current)
        if restored is None and scope == CriteriaScope.GLOBAL:
            raise CriteriaConflict(
                f"version {current.pk} replaced no global version: there is nothing to roll back to; "
                "promote another candidate instead."
            )
        current.state = CriteriaState.RETIRED
        current.save(update_fields=["state", "updated_at"])
        if restored is not None:
            restored.state = CriteriaState.CURRENT
            restored.save(update_fields=["state", "updated_at"])
        return _record(current, CriteriaAction.ROLLBACK, changed_by, reason, restored=restored)


def _refuse_hash_of_other_texts(criteria: Criteria, *, version_id: int | None) -> None:
    """A hash names one set of texts (scores are judged and grouped by it). EP-0028's hash joins
    the score and follow-up prompts with nothing between them, so moving text from the end of
    one to the start of the other keeps it: such texts are refused, not stored under a hash
    whose scores were judged by others."""
    texts = _texts(criteria)
    for other in CriteriaVersion.objects.filter(prompt_hash=criteria.prompt_hash).exclude(pk=version_id):
        if any(getattr(other, name) != value for name, value in texts.items()):
            raise CriteriaError(
                [
                    f"These prompts have the hash of version {other.pk} ({criteria.prompt_hash[:12]}…) with "
                    "other texts: the hash joins the score and follow-up prompts with nothing between them. "
                    "Change a word, not only where the two prompts meet."
                ]
            )


def build_calibrated_candidate(
    base_id: int, *, size: int = corrections.DEFAULT_EXAMPLES, created_by: str, description: str = ""
) -> CriteriaVersion:
    """A new candidate of ``base_id``'s scope: its texts, with up to ``size`` reviewers'
    corrections as worked examples (``corrections.chosen_corrections``) in place of any it had,
    placed at ``{{CALIBRATION_EXAMPLES}}`` (added before the score prompt's session data where
    missing). A new version with its own hash, to be tried like any other. Raises
    ``CriteriaError`` for a size out of range or when no review corrects the judge."""
    if not 1 <= size <= corrections.MAX_EXAMPLES:
        raise CriteriaError(f"size: from 1 to {corrections.MAX_EXAMPLES} examples, not {size}.")
    base = CriteriaVersion.objects.filter(pk=base_id).first()
    if base is None:
        raise CriteriaVersion.DoesNotExist(f"no criteria version {base_id}")
    chosen = corrections.chosen_corrections(size)
    if not chosen:
        raise CriteriaError(
            f"no review corrects the judge (a reviewer's score {corrections.MIN_CORRECTION} or more points "
            "from the judge's, with a note): there is nothing to calibrate with."
        )
    examples = tuple(corrections.example_of(correction) for correction in chosen)
    criteria = dataclasses.replace(
        selectors.criteria_of(base),
        score_prompt=with_examples_placeholder(base.score_prompt),
        examples=examples,
    )
    said = f"Calibrated from v{base.pk}: {len(examples)} reviewers' corrections as worked examples."
    with transaction.atomic():
        version = create_draft(
            criteria,
            scope=base.scope,
            scope_value=base.scope_value,
            description=f"{said}\n{description}".strip(),
            created_by=created_by,
        )
        return make_candidate(version.pk, changed_by=created_by, reason=said)


def with_examples_placeholder(score_prompt: str) -> str:
    """``score_prompt`` with ``{{CALIBRATION_EXAMPLES}}`` in it: where it is already, else on its
    own line before the "## SESSION DATA" heading (the shipped prompt's), else before the line
    that places the session."""
    if EXAMPLES_PLACEHOLDER in score_prompt:
        return score_prompt
    at = score_prompt.find("## SESSION DATA")
    if at < 0:
        at = score_prompt.rfind("\n", 0, score_prompt.find("{{SESSION_CONVERSATION}}")) + 1
    return f"{score_prompt[:at]}{EXAMPLES_PLACEHOLDER}\n\n{score_prompt[at:]}"


def _texts(criteria: Criteria) -> dict:
    return {
        "system_prompt": criteria.system_prompt,
        "score_prompt": criteria.score_prompt,
        "followup_prompt": criteria.followup_prompt,
        "examples": [dataclasses.asdict(example) for example in criteria.examples],
        "prompt_hash": criteria.prompt_hash,
    }


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise CriteriaError("reason: say why; it is kept with the change.")


def _locked(version_id: int) -> CriteriaVersion:
    version = CriteriaVersion.objects.select_for_update().filter(pk=version_id).first()
    if version is None:
        raise CriteriaVersion.DoesNotExist(f"no criteria version {version_id}")
    return version


def _current_locked(scope: str, scope_value: str) -> CriteriaVersion | None:
    return (
        CriteriaVersion.objects.select_for_update()
        .filter(state=CriteriaState.CURRENT, scope=scope, scope_value=scope_value)
        .first()
    )


def _move(
    version_id: int, source: str, target: str, action: str, changed_by: str, reason: str
) -> CriteriaVersion:
    with transaction.atomic():
        version = _locked(version_id)
        if version.state != source:
            raise CriteriaConflict(f"version {version.pk} is {version.state}, not {source}.")
        version.state = target
        version.save(update_fields=["state", "updated_at"])
        _record(version, action, changed_by, reason)
    return version


def _record(version: CriteriaVersion, action: str, changed_by: str, reason: str, **others) -> CriteriaChange:
    return CriteriaChange.objects.create(
        version=version, action=action, changed_by=changed_by[:255], reason=reason, **others
    )
