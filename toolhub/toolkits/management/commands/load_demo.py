"""Load the demo toolkits (toolhub/toolkits/demo/*.py) owned by the first admin, so a
newcomer sees a populated dashboard. Safe to run again: identical sources add nothing."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from toolhub.toolkits import services
from toolhub.toolkits.models import Toolkit

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"


class Command(BaseCommand):
    help = "Load the demo toolkits."

    def handle(self, *args, **options):
        owner = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if owner is None:
            raise CommandError("Create an admin first (manage.py create_admin).")
        for path in sorted(DEMO_DIR.glob("*.py")):
            slug = path.stem
            source = path.read_bytes()
            toolkit = Toolkit.objects.filter(slug=slug).first()
            if toolkit is None:
                services.toolkit_create(source=source, user=owner, slug=slug, filename=path.name)
                self.stdout.write(f"Loaded {slug}")
            else:
                result = services.revision_upload(toolkit=toolkit, source=source, user=owner, filename=path.name)
                self.stdout.write(f"{slug}: {'new revision' if result.created else 'unchanged'}")
