from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scoring", "0017_cache_cached_input_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="sessionscore",
            name="input_coverage",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
