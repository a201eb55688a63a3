from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("toolkits", "0005_build_steps")]

    operations = [
        migrations.AddField(model_name="revision", name="imported", field=models.BooleanField(default=False)),
    ]
