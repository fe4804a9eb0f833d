from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_onto_tools(apps, schema_editor):
    MissingTool = apps.get_model("scoring", "MissingTool")
    SessionScore = apps.get_model("scoring", "SessionScore")
    score = SessionScore.objects.filter(pk=OuterRef("score_id"))
    MissingTool.objects.update(
        total_score=Subquery(score.values("total_score")[:1]),
        alert_type=Subquery(score.values("session__alert_type")[:1]),
        chain_id=Subquery(score.values("session__chain_id")[:1]),
    )


class Migration(migrations.Migration):

    dependencies = [
        ("scoring", "0021_statsperf_latest_completed_figures"),
    ]

    operations = [
        migrations.AddField(
            model_name="missingtool",
            name="total_score",
            field=models.IntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="missingtool",
            name="alert_type",
            field=models.CharField(default="", editable=False, max_length=255),
        ),
        migrations.AddField(
            model_name="missingtool",
            name="chain_id",
            field=models.CharField(default="", editable=False, max_length=255),
        ),
        migrations.RunPython(copy_onto_tools, migrations.RunPython.noop),
    ]
