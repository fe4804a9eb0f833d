from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scoring", "0004_worker_heartbeats"),
    ]

    operations = [
        migrations.AddField(
            model_name="sessionscore",
            name="warnings",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
