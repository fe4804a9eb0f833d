from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0008_scoring_events_without_publish_failed'),
    ]

    operations = [
        migrations.AddField(
            model_name='alertsession',
            name='ingest_notes',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
