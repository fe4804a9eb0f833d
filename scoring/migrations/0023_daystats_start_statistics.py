"""PostgreSQL statistics on the session start's day and ISO week, the expressions the fleet
statistics group by (scoring.insights.stats): without them PostgreSQL estimates as many
groups as sessions (it knows only the start times' distinct values) and sorts 100,000 rows
where hashing a few hundred groups would do. ANALYZE (and autovacuum) keeps them."""

from django.db import migrations

# The same expressions, written as Django writes them in the grouped queries: PostgreSQL
# uses a statistics object only for an identical expression.
EXPRESSIONS = {
    "alert_sessions_start_day": "(started_at_us / 86400000000)",
    "alert_sessions_start_week": "(((started_at_us / 86400000000) + 3) / 7)",
}


def create_statistics(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, expression in EXPRESSIONS.items():
        schema_editor.execute(f"CREATE STATISTICS {name} ON ({expression}) FROM alert_sessions")
    schema_editor.execute("ANALYZE alert_sessions")


def drop_statistics(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in EXPRESSIONS:
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ("scoring", "0022_backlog_missing_tool_copies"),
    ]

    operations = [
        migrations.RunPython(create_statistics, drop_statistics),
    ]
