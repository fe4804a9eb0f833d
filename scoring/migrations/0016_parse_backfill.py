"""Read the dimensions and missing tools of the scores completed before they were read at
completion: the same reading as ``manage.py parse_judge_replies``, once."""

from django.db import migrations

from scoring import services


def read_stored_replies(apps, schema_editor):
    services.read_stored_replies(apps.get_model("scoring", "SessionScore"))


class Migration(migrations.Migration):
    # A transaction per batch of scores (read_stored_replies), not one for the whole table;
    # an interrupted run is finished by the next (or by the command).
    atomic = False

    dependencies = [
        ("scoring", "0015_stats_missing_tool_key"),
    ]

    operations = [migrations.RunPython(read_stored_replies, migrations.RunPython.noop)]
