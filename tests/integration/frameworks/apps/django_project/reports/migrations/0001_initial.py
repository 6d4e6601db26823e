from typing import ClassVar

from django.db import migrations, models

from ..progress import hold_until_flag, record


def slowly(apps, schema_editor):
    record("migrating")
    hold_until_flag()
    record("migrated")


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar = []
    operations: ClassVar = [
        migrations.CreateModel(
            name="Report",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("day", models.CharField(max_length=10, unique=True)),
                ("fence", models.IntegerField()),
            ],
        ),
        migrations.RunPython(slowly, migrations.RunPython.noop),
    ]
