from django.db import migrations, models


class Migration(migrations.Migration):
    """The spend of a day and a month summed from an index alone (scoring.budget)."""

    dependencies = [
        ("scoring", "0028_criteria_versions"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="sessionscore",
            index=models.Index(fields=["completed_at_us", "cost_usd"], name="ix_session_scores_spend"),
        ),
    ]
