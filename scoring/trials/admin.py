"""Admin for trials (docs/dashboard.md, "Trials"): each trial read-only, with its figures as the
dashboard's trial page shows them (``scoring/_trial_results.html``); trying a candidate criteria
version (its page's "Try this candidate": a form, then the dry run's estimate to confirm, then
the trial) and cancelling a running trial. Every write goes through ``scoring.trials.services``;
staff read, staff or the change_criteria permission start and cancel (as criteria are changed).
``scoring.admin`` imports this module, which registers it.
"""

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from scoring.criteria.services import can_change_criteria
from scoring.insights import page as insights_page
from scoring.models import CriteriaState, Trial, TrialStatus
from scoring.templatetags.scoring_ui import us_datetime
from scoring.trials import page, selectors, services

ADMIN_MEDIA = forms.Media(css={"all": ["scoring/badges.css", "scoring/admin.css"]})
WRITE_REFUSED = "Starting or cancelling a trial needs staff or the change_criteria permission."


class TrialForm(forms.Form):
    """The sample a trial draws; ``session_ids`` are set once its estimate is shown, so that the
    trial started is the sample estimated."""

    size = forms.IntegerField(
        min_value=1,
        max_value=services.MAX_TRIAL_SIZE,
        initial=services.DEFAULT_TRIAL_SIZE,
        help_text="How many reviewed sessions to draw; each is judged twice (candidate and current).",
    )
    alert_type = forms.ChoiceField(required=False, label="Alert type")
    chain_id = forms.ChoiceField(required=False, label="Chain")
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="What it is for"
    )
    candidate_model = forms.CharField(
        required=False,
        max_length=255,
        label="Judge model to try",
        help_text="Optional: a model of the configured judge's provider (litellm's name), tried with these "
        "criteria; empty: the configured model.",
    )
    session_ids = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = insights_page.filter_choices()
        self.fields["alert_type"].choices = [("", "Any alert type")] + [
            (value, value) for value in choices["alert_types"]
        ]
        self.fields["chain_id"].choices = [("", "Any chain")] + [
            (value, value) for value in choices["chains"]
        ]

    def plan(self, candidate_id) -> services.TrialPlan:
        """The dry run of the valid form's sample; raises ``services.TrialRejected``."""
        data = self.cleaned_data
        return services.plan_trial(
            candidate_id=candidate_id,
            candidate_model=data["candidate_model"],
            size=data["size"],
            alert_type=data["alert_type"],
            chain_id=data["chain_id"],
            session_ids=data["session_ids"].split(",") if data["session_ids"] else None,
        )


@admin.register(Trial)
class TrialAdmin(admin.ModelAdmin):
    list_display = ["short_id", "candidate_version", "status", "progress_text", "created_by", "created"]
    list_filter = ["status"]
    search_fields = ["trial_id", "candidate_hash", "created_by", "description"]
    list_per_page = 50
    fields = [
        "trial_id", "candidate_version", "status", "sample", "judge_model", "description", "created_by",
        "created", "ended",
    ]  # fmt: skip
    readonly_fields = fields
    change_form_template = "admin/scoring/trial/change_form.html"

    @property
    def media(self):
        return super().media + ADMIN_MEDIA

    def get_queryset(self, request):
        return selectors.with_progress(super().get_queryset(request).select_related("candidate"))

    # --- Who may do what: staff read (as criteria versions); trials are started from a candidate.

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # its figures are the record of why a candidate was promoted or not

    # --- Columns and fields

    @admin.display(description="Trial", ordering="trial_id")
    def short_id(self, trial):
        return str(trial.trial_id)[:8]

    @admin.display(description="Candidate", ordering="candidate_id")
    def candidate_version(self, trial):
        model = format_html(" with {}", trial.candidate_model) if trial.candidate_model else ""
        if trial.candidate is None:
            return trial.candidate_model
        return format_html(
            '<a href="{}">v{}</a> ({}, <span class="mono" title="{}">{}</span>){}',
            reverse("admin:scoring_criteriaversion_change", args=[trial.candidate_id]),
            trial.candidate_id,
            trial.candidate.scope_label,
            trial.candidate_hash,
            trial.candidate_hash[:12],
            model,
        )

    @admin.display(description="Progress")
    def progress_text(self, trial):
        progress = selectors.progress(trial)
        failed = f" ({progress['failed']} failed)" if progress["failed"] else ""
        return f"{progress['completed']} / {progress['total']} completed{failed}"

    @admin.display(description="Sample")
    def sample(self, trial):
        narrowed = [
            f"alert type {trial.alert_type}" if trial.alert_type else "",
            f"chain {trial.chain_id}" if trial.chain_id else "",
        ]
        asked = ", ".join([f"{trial.size} sessions asked for", *filter(None, narrowed)])
        return f"{asked} (seed {trial.seed})"

    @admin.display(description="Started", ordering="created_at_us")
    def created(self, trial):
        return us_datetime(trial.created_at_us)

    @admin.display(description="Ended", ordering="ended_at_us")
    def ended(self, trial):
        return us_datetime(trial.ended_at_us) or "—"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        trial = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if trial is not None:
            context |= page.trial_context(trial)
            may_change = can_change_criteria(request.user)
            context["can_cancel"] = trial.status == TrialStatus.RUNNING and may_change
            # The operator decides from the trial: the candidate's own promote and retire pages.
            context["can_decide"] = (
                trial.candidate is not None and trial.candidate.state == CriteriaState.CANDIDATE and may_change
            )
        return super().change_view(request, object_id, form_url, context)

    # --- Trying a candidate; cancelling

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("try/<int:version_id>/", wrap(self.try_view), name="scoring_trial_try"),
            path("<uuid:trial_id>/cancel/", wrap(self.cancel_view), name="scoring_trial_cancel"),
        ] + super().get_urls()

    def try_view(self, request, version_id):
        """GET: the sample's form. POST: its estimate to confirm (the dry run, writing nothing),
        then, confirmed (``start``), the trial, started as estimated."""
        version_url = reverse("admin:scoring_criteriaversion_change", args=[version_id])
        if not can_change_criteria(request.user):
            self.message_user(request, WRITE_REFUSED, messages.ERROR)
            return HttpResponseRedirect(version_url)
        try:
            version = services.triable_candidate(version_id)
        except services.TrialRejected as exc:
            self.message_user(request, f"Not tried: {exc}.", messages.ERROR)
            return HttpResponseRedirect(version_url)
        form = TrialForm(request.POST if request.method == "POST" else None)
        plan = None
        if request.method == "POST" and form.is_valid():
            try:
                plan = form.plan(version.pk)
            except services.TrialRejected as exc:
                form.add_error(None, str(exc))  # asked again, saying why
            else:
                if "start" in request.POST:
                    trial = services.start_trial(
                        plan,
                        created_by=request.user.get_username(),
                        description=form.cleaned_data["description"],
                    )
                    queued = trial.scorings.count()
                    self.message_user(
                        request,
                        f"Trial started: {len(plan.session_ids)} sessions, {queued} scorings queued.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(reverse("admin:scoring_trial_change", args=[trial.pk]))
                # Starting takes the very sessions the estimate shown is of.
                form = TrialForm({**form.cleaned_data, "session_ids": ",".join(plan.session_ids)})
                form.is_valid()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "version": version,
            "form": form,
            "plan": plan,
            "sessions_drawn": len(plan.session_ids) if plan else 0,
        }
        return TemplateResponse(request, "admin/scoring/trial/try.html", context)

    def cancel_view(self, request, trial_id):
        """GET asks to confirm; POST cancels the running trial."""
        trial = get_object_or_404(Trial, pk=trial_id)
        back = HttpResponseRedirect(reverse("admin:scoring_trial_change", args=[trial.pk]))
        if not can_change_criteria(request.user):
            self.message_user(request, WRITE_REFUSED, messages.ERROR)
            return back
        if request.method == "POST":
            try:
                services.cancel_trial(trial.pk, cancelled_by=request.user.get_username())
            except services.TrialRejected as exc:
                self.message_user(request, f"Not cancelled: {exc}.", messages.ERROR)
            else:
                self.message_user(
                    request, "Trial cancelled: its waiting scorings will not run.", messages.SUCCESS
                )
            return back
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": trial,
            "progress": selectors.progress(trial),
        }
        return TemplateResponse(request, "admin/scoring/trial/cancel.html", context)
