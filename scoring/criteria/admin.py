"""Admin for the judge's criteria versions (docs/criteria.md, "In the admin").

A draft is written here (typed, or uploaded from text files) and shown with its differences
from the version that judges its scope now; any version's prompt can be previewed as the judge
would be sent it for a chosen session. Making a candidate, promoting, rolling back and retiring
are one action each, asking why; "Build calibrated candidate", an action of the list on one
chosen version, makes a candidate of its texts with reviewers' corrections as worked examples
("Calibration"). Every write goes through ``scoring.criteria.services``;
versions are never deleted. ``scoring.admin`` imports this module, which registers it.
"""

import difflib
import uuid

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from scoring.criteria import selectors, services
from scoring.judge import conversation
from scoring.judge.prompts import Criteria, criteria_problems
from scoring.models import AlertSession, CriteriaScope, CriteriaState, CriteriaVersion
from scoring.selectors import with_transcript_flag

TEXT_FIELDS = (("system", "system_prompt"), ("score", "score_prompt"), ("followup", "followup_prompt"))
SCORES_SHOWN = 20  # on a version's page, the newest scorings made under it
TEXT_TITLES = {
    "system_prompt": "System prompt",
    "score_prompt": "Score prompt",
    "followup_prompt": "Follow-up prompt",
}


class CriteriaVersionForm(forms.ModelForm):
    """A draft's texts, typed or uploaded (a file replaces what is typed beside it)."""

    score_file = forms.FileField(required=False, help_text="Or upload the score prompt (UTF-8 text).")
    followup_file = forms.FileField(required=False, help_text="Or upload the follow-up prompt.")
    system_file = forms.FileField(required=False, help_text="Or upload a system prompt.")

    class Meta:
        model = CriteriaVersion
        fields = ["scope", "scope_value", "description", "system_prompt", "score_prompt", "followup_prompt"]
        widgets = {
            name: forms.Textarea(attrs={"rows": 12, "class": "vLargeTextField mono"})
            for _, name in TEXT_FIELDS
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A version shown read-only has a form without these fields.
        for _, name in TEXT_FIELDS:
            if name in self.fields:
                self.fields[name].required = False
                self.fields[name].strip = False
        if self.instance.pk is not None:  # the scope is chosen once, when the draft is made
            for name in ("scope", "scope_value"):
                if name in self.fields:
                    self.fields[name].disabled = True

    def clean(self):
        cleaned = super().clean()
        uploads = {key: cleaned.get(f"{key}_file") for key, _ in TEXT_FIELDS}
        try:
            from_files = services.criteria_from_files(
                score=uploads["score"].read() if uploads["score"] else b"",
                followup=uploads["followup"].read() if uploads["followup"] else b"",
                system=uploads["system"].read() if uploads["system"] else b"",
            )
        except services.CriteriaError as exc:
            raise forms.ValidationError(exc.problems) from None
        for key, name in TEXT_FIELDS:
            typed = services.typed_text(cleaned.get(name) or "")
            cleaned[name] = getattr(from_files, name) if uploads[key] else typed
        problems = criteria_problems(self.criteria())
        if self.instance.pk is None:
            problems += services.scope_problems(cleaned.get("scope") or "", cleaned.get("scope_value") or "")
        if problems:
            raise forms.ValidationError(problems)
        return cleaned

    def criteria(self) -> Criteria:
        return Criteria(
            score_prompt=self.cleaned_data.get("score_prompt") or "",
            followup_prompt=self.cleaned_data.get("followup_prompt") or "",
            system_prompt=self.cleaned_data.get("system_prompt") or "",
        )


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, label="Why")


# What each one-action change is called, which versions it applies to, and what it does.
STATE_CHANGES = {
    "candidate": (
        "Make candidate",
        (CriteriaState.DRAFT,),
        "Freeze the draft's texts, ready to be promoted.",
    ),
    "promote": (
        "Promote",
        (CriteriaState.CANDIDATE,),
        (
            "Make it the current version of its scope: the scope's sessions are judged by it from now on, "
            "and their older scores become obsolete. The version it replaces is retired."
        ),
    ),
    "rollback": (
        "Roll back",
        (CriteriaState.CURRENT,),
        (
            "Retire it and make current again the version its promotion replaced (a scope other than global "
            "with none falls back to the wider scope)."
        ),
    ),
    "retire": (
        "Retire",
        (CriteriaState.DRAFT, CriteriaState.CANDIDATE),
        "Set it aside; it will judge nothing.",
    ),
}


@admin.register(CriteriaVersion)
class CriteriaVersionAdmin(admin.ModelAdmin):
    form = CriteriaVersionForm
    list_display = [
        "version",
        "state",
        "scope_label",
        "short_hash",
        "description",
        "created_by",
        "updated_at",
    ]
    list_filter = ["state", "scope"]
    search_fields = ["prompt_hash", "scope_value", "description"]
    actions = ["build_calibrated_candidate"]
    change_form_template = "admin/scoring/criteriaversion/change_form.html"

    @property
    def media(self):
        return super().media + forms.Media(css={"all": ["scoring/admin.css"]})

    @admin.display(description="Version", ordering="id")
    def version(self, version):
        return f"v{version.pk}"

    @admin.display(description="Scope", ordering="scope_value")
    def scope_label(self, version):
        return version.scope_label

    @admin.display(description="Hash", ordering="prompt_hash")
    def short_hash(self, version):
        return format_html(
            '<span class="mono" title="{}">{}</span>', version.prompt_hash, version.prompt_hash[:12]
        )

    @admin.action(description="Build calibrated candidate", permissions=["calibrate"])
    def build_calibrated_candidate(self, request, queryset):
        """A candidate of the one chosen version's texts with the default number of reviewers'
        corrections as worked examples."""
        chosen = list(queryset.values_list("pk", flat=True)[:2])
        if len(chosen) != 1:
            self.message_user(request, "Choose one version to calibrate.", messages.ERROR)
            return None
        try:
            built = services.build_calibrated_candidate(chosen[0], created_by=request.user.get_username())
        except services.CriteriaError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        self.message_user(
            request,
            format_html(
                'Built <a href="{}">v{}</a>, a candidate with {} worked examples (hash {}); try it before '
                "promoting it.",
                reverse("admin:scoring_criteriaversion_change", args=[built.pk]),
                built.pk,
                len(built.examples),
                built.prompt_hash[:12],
            ),
            messages.SUCCESS,
        )
        return None

    def has_calibrate_permission(self, request):
        return services.can_change_criteria(request.user)

    # --- Who may do what: anyone on the staff reads; a draft is written by whoever may change criteria.

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request):
        return services.can_change_criteria(request.user)

    def has_change_permission(self, request, obj=None):
        allowed = services.can_change_criteria(request.user)
        return allowed and (obj is None or obj.state == CriteriaState.DRAFT)

    def has_delete_permission(self, request, obj=None):
        return False  # every version stays: scores carry their hashes

    def get_fields(self, request, obj=None):
        if obj is None or self.has_change_permission(request, obj):
            fields = ["scope", "scope_value", "description", "system_prompt", "system_file", "score_prompt"]
            return [*fields, "score_file", "followup_prompt", "followup_file"]
        return ["scope", "scope_value", "description", "system_prompt", "score_prompt", "followup_prompt"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        calibrated = ["worked_examples"] if obj.examples else []
        return ["prompt_hash", "state", "created_by", "created_at", *calibrated]

    def get_fieldsets(self, request, obj=None):
        fieldsets = [(None, {"fields": self.get_fields(request, obj)})]
        if obj is not None:
            fieldsets.insert(0, ("Version", {"fields": ["prompt_hash", "state", "created_by", "created_at"]}))
            if obj.examples:
                fieldsets.append(("Calibration", {"fields": ["worked_examples"]}))
        return fieldsets

    @admin.display(description="Worked examples")
    def worked_examples(self, version):
        """Each example as the operator checks it: whose session, both scores, the note, the excerpt."""
        return format_html_join(
            "",
            '<div class="calibration-example"><p>Session <a href="{}">{}</a> ({}): the judge scored {}, '
            "the reviewer {}.</p><p>{}</p><pre class=\"mono\">{}</pre></div>",
            (
                (
                    reverse("admin:scoring_alertsession_change", args=[example["session_id"]]),
                    example["session_id"],
                    example["alert_type"],
                    example["judge_score"],
                    example["reviewer_score"],
                    example["note"],
                    example["excerpt"],
                )
                for example in version.examples
            ),
        )

    def save_model(self, request, obj, form, change):
        by = request.user.get_username()
        criteria = form.criteria()
        if change:
            services.edit_draft(obj.pk, criteria, description=form.cleaned_data["description"], edited_by=by)
        else:
            created = services.create_draft(
                criteria,
                scope=form.cleaned_data["scope"],
                scope_value=form.cleaned_data["scope_value"],
                description=form.cleaned_data["description"],
                created_by=by,
            )
            obj.pk = created.pk
        obj.refresh_from_db()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        version = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if version is not None:
            scores = selectors.scores_under(version.prompt_hash)
            context |= {
                "score_count": scores.count(),
                # With whether each keeps its transcript: the score's page shows it.
                "scores": list(with_transcript_flag(scores)[:SCORES_SHOWN]),
                "diff": diff_against_current(version),
                "changes": selectors.changes_of(version),
                "state_changes": [
                    (name, label)
                    for name, (label, states, _) in STATE_CHANGES.items()
                    if version.state in states and services.can_change_criteria(request.user)
                ],
                # A candidate's button to try it against the current criteria (scoring.trials.admin).
                "can_try": (
                    version.state == CriteriaState.CANDIDATE and services.can_change_criteria(request.user)
                ),
                "trials": list(version.trials.order_by("-created_at_us")),
            }
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:version_id>/preview/", wrap(self.preview_view), name="scoring_criteriaversion_preview"
            ),
            path(
                "<int:version_id>/state/<str:change>/",
                wrap(self.state_change_view),
                name="scoring_criteriaversion_state",
            ),
        ] + super().get_urls()

    def preview_view(self, request, version_id):
        """The prompt the judge would be sent under this version for the session named in ``?session=``."""
        version = get_object_or_404(CriteriaVersion, pk=version_id)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": version}
        raw = request.GET.get("session", "").strip()
        context["session_id"] = raw
        if raw:
            try:
                session = AlertSession.objects.get(pk=uuid.UUID(raw))
            except (ValueError, AlertSession.DoesNotExist):
                context["error"] = f"No session {raw}."
            else:
                context |= {
                    "session": session,
                    "criteria": selectors.criteria_of(version),
                    "prompt": conversation.build_score_prompt(
                        session, criteria=selectors.criteria_of(version)
                    ),
                    "judged_by": selectors.version_for_session(session),
                }
        return TemplateResponse(request, "admin/scoring/criteriaversion/preview.html", context)

    def state_change_view(self, request, version_id, change):
        """One action with its reason: make candidate, promote, roll back or retire (GET asks why)."""
        if change not in STATE_CHANGES:
            return HttpResponseRedirect(reverse("admin:scoring_criteriaversion_changelist"))
        version = get_object_or_404(CriteriaVersion, pk=version_id)
        back = HttpResponseRedirect(reverse("admin:scoring_criteriaversion_change", args=[version.pk]))
        if not services.can_change_criteria(request.user):
            self.message_user(
                request, "Changing criteria needs staff or the change_criteria permission.", messages.ERROR
            )
            return back
        label, _, explained = STATE_CHANGES[change]
        form = ReasonForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                outcome = self._apply(request, version, change, form.cleaned_data["reason"])
            except services.CriteriaError as exc:
                form.add_error(None, str(exc))  # asked again, saying why
            else:
                self.message_user(request, outcome, messages.SUCCESS)
                return back
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": version,
            "form": form,
            "label": label,
            "explained": explained,
            "diff": diff_against_current(version) if change == "promote" else None,
            "restores": rollback_target(version) if change == "rollback" else None,
        }
        return TemplateResponse(request, "admin/scoring/criteriaversion/state_change.html", context)

    def _apply(self, request, version, change: str, reason: str) -> str:
        """Make the change; what was done, in words. Raises ``services.CriteriaError``."""
        by = request.user.get_username()
        if change == "rollback":
            done = services.rollback(
                scope=version.scope, scope_value=version.scope_value, changed_by=by, reason=reason
            )
            restored = (
                f"v{done.restored_id} is current again" if done.restored_id else "the wider scope judges"
            )
            return f"Rolled back v{version.pk} ({version.scope_label}): {restored}."
        move = {
            "candidate": services.make_candidate,
            "promote": services.promote,
            "retire": services.retire,
        }
        moved = move[change](version.pk, changed_by=by, reason=reason)
        return f"Criteria v{moved.pk} ({moved.scope_label}) are {moved.state}."


def comparison_version(version: CriteriaVersion) -> CriteriaVersion | None:
    """What a version is shown against: the current version of its scope, or else the global one
    (what judges a scope with none of its own), unless that is the version itself."""
    current = selectors.current_version(version.scope, version.scope_value)
    if current is None:
        current = selectors.current_version(CriteriaScope.GLOBAL, "")
    return current if current is not None and current.pk != version.pk else None


def diff_against_current(version: CriteriaVersion) -> dict | None:
    """A unified diff of each text against ``comparison_version`` (None: nothing to compare with)."""
    current = comparison_version(version)
    if current is None:
        return None
    texts = []
    for _, name in TEXT_FIELDS:
        before, after = getattr(current, name), getattr(version, name)
        lines = list(
            difflib.unified_diff(
                before.splitlines(), after.splitlines(), f"v{current.pk}", f"v{version.pk}", lineterm="", n=2
            )
        )
        texts.append((TEXT_TITLES[name], diff_html(lines) if lines else None))
    return {"against": current, "texts": texts}


def diff_html(lines: list[str]):
    """Diff lines as HTML, each line marked added, removed or unchanged."""
    kinds = {"+": "diff-add", "-": "diff-del", "@": "diff-hunk"}

    def kind(line: str) -> str:
        return "diff-hunk" if line[:3] in ("+++", "---") else kinds.get(line[:1], "")

    return format_html(
        '<pre class="criteria-diff">{}</pre>',
        format_html_join("\n", '<span class="{}">{}</span>', ((kind(line), line) for line in lines)),
    )


def rollback_target(version: CriteriaVersion) -> str:
    """What rolling back ``version``'s scope makes current, in words."""
    replaced = selectors.replaced_by_promotion(version)
    if replaced is not None:
        return f"v{replaced.pk} ({replaced.prompt_hash[:12]}) becomes current again."
    if version.scope == CriteriaScope.GLOBAL:
        return (
            "Nothing: it replaced no global version, so it cannot be rolled back (promote another instead)."
        )
    return "No version of its own: its sessions fall back to the wider scope."
