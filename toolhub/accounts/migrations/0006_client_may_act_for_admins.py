from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0005_client_rate_limits")]

    operations = [
        migrations.AddField(
            model_name="clientcredential",
            name="may_act_for_admins",
            field=models.BooleanField(default=False),
        ),
    ]
