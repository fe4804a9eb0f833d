from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0026_judge_replies_and_transcripts'),
    ]

    operations = [
        migrations.CreateModel(
            name='JudgeTokenRatio',
            fields=[
                ('model', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('ratio', models.FloatField()),
                ('provider_tokens', models.IntegerField()),
                ('counted_tokens', models.IntegerField()),
                ('learned_at_us', models.BigIntegerField()),
            ],
            options={
                'db_table': 'judge_token_ratio',
            },
        ),
    ]
