"""Criteria versions (docs/criteria.md): the criteria history of ``scoring_criteria`` becomes
versions, the shipped prompts the first current global one; then that table goes."""

import hashlib

import django.db.models.deletion
from django.db import migrations, models

from scoring.judge.prompts import SHIPPED_CRITERIA

SEEDED_BY = "migration 0028"
SHIPPED_DESCRIPTION = "The criteria shipped with the service."


def seed_versions(apps, schema_editor):
    """Each stored criteria hash becomes a retired global version, the shipped one the current
    global version (created if no score used it yet), each with its creation recorded."""
    ScoringCriteria = apps.get_model("scoring", "ScoringCriteria")
    CriteriaVersion = apps.get_model("scoring", "CriteriaVersion")
    CriteriaChange = apps.get_model("scoring", "CriteriaChange")
    shipped = SHIPPED_CRITERIA.prompt_hash
    seen_shipped = False
    for old in ScoringCriteria.objects.order_by("first_used_at"):
        is_shipped = old.prompt_hash == shipped
        seen_shipped |= is_shipped
        version = CriteriaVersion.objects.create(
            prompt_hash=old.prompt_hash,
            score_prompt=old.score_prompt,
            followup_prompt=old.followup_prompt,
            description=SHIPPED_DESCRIPTION if is_shipped else "Criteria used before versions existed.",
            state="current" if is_shipped else "retired",
            created_by=SEEDED_BY,
        )
        CriteriaChange.objects.create(
            version=version,
            action="create",
            changed_by=SEEDED_BY,
            reason=f"first used {old.first_used_at.isoformat()}",
        )
    if not seen_shipped:
        seed_shipped(CriteriaVersion, CriteriaChange)


def seed_shipped(CriteriaVersion, CriteriaChange):
    """The shipped criteria as the current global version, their creation recorded."""
    version = CriteriaVersion.objects.create(
        prompt_hash=SHIPPED_CRITERIA.prompt_hash,
        score_prompt=SHIPPED_CRITERIA.score_prompt,
        followup_prompt=SHIPPED_CRITERIA.followup_prompt,
        description=SHIPPED_DESCRIPTION,
        state="current",
        created_by=SEEDED_BY,
    )
    CriteriaChange.objects.create(version=version, action="create", changed_by=SEEDED_BY, reason="")


def unseed_versions(apps, schema_editor):
    """Back to the criteria history: one row per hash a non-draft version holds, of the
    versions the history can hold (two prompts; not one with a system prompt or worked
    examples, whose texts would no longer make their hash)."""
    ScoringCriteria = apps.get_model("scoring", "ScoringCriteria")
    CriteriaVersion = apps.get_model("scoring", "CriteriaVersion")
    for version in CriteriaVersion.objects.exclude(state="draft").order_by("id"):
        two_prompts = (version.score_prompt + version.followup_prompt).encode("utf-8")
        if hashlib.sha256(two_prompts).hexdigest() != version.prompt_hash:
            continue
        ScoringCriteria.objects.get_or_create(
            prompt_hash=version.prompt_hash,
            defaults={"score_prompt": version.score_prompt, "followup_prompt": version.followup_prompt},
        )


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0027_judge_token_ratio'),
    ]

    operations = [
        migrations.CreateModel(
            name='CriteriaChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('action', models.CharField(choices=[('create', 'Create'), ('edit', 'Edit'), ('candidate', 'Candidate'), ('promote', 'Promote'), ('rollback', 'Rollback'), ('retire', 'Retire')], max_length=16)),
                ('changed_by', models.CharField(max_length=255)),
                ('changed_at', models.DateTimeField(auto_now_add=True)),
                ('reason', models.TextField(blank=True, default='')),
            ],
            options={
                'db_table': 'criteria_changes',
                'ordering': ['-changed_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='CriteriaVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('prompt_hash', models.CharField(db_index=True, editable=False, max_length=64)),
                ('system_prompt', models.TextField(blank=True, default='')),
                ('score_prompt', models.TextField()),
                ('followup_prompt', models.TextField()),
                ('description', models.TextField(blank=True, default='', help_text='What these criteria change, and why.')),
                ('state', models.CharField(choices=[('draft', 'Draft'), ('candidate', 'Candidate'), ('current', 'Current'), ('retired', 'Retired')], default='draft', max_length=16)),
                ('scope', models.CharField(choices=[('global', 'Global'), ('alert_type', 'Alert type'), ('chain', 'Chain')], default='global', max_length=16)),
                ('scope_value', models.CharField(blank=True, default='', help_text='The alert type or chain id; empty for global.', max_length=255)),
                ('created_by', models.CharField(max_length=255)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'db_table': 'criteria_versions',
                'ordering': ['-id'],
                'permissions': [('change_criteria', 'Can create, promote and roll back judge criteria')],
            },
        ),
        migrations.AddConstraint(
            model_name='criteriaversion',
            constraint=models.UniqueConstraint(condition=models.Q(('state', 'current')), fields=('scope', 'scope_value'), name='one_current_criteria_per_scope'),
        ),
        migrations.AddConstraint(
            model_name='criteriaversion',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('scope', 'global'), ('scope_value', '')), models.Q(models.Q(('scope', 'global'), _negated=True), models.Q(('scope_value', ''), _negated=True)), _connector='OR'), name='criteria_scope_value_names_the_scope'),
        ),
        migrations.AddField(
            model_name='criteriachange',
            name='replaced',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='scoring.criteriaversion'),
        ),
        migrations.AddField(
            model_name='criteriachange',
            name='restored',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='scoring.criteriaversion'),
        ),
        migrations.AddField(
            model_name='criteriachange',
            name='version',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='changes', to='scoring.criteriaversion'),
        ),
        migrations.RunPython(seed_versions, unseed_versions),
        migrations.DeleteModel(
            name='ScoringCriteria',
        ),
    ]
