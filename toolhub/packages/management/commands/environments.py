"""List this host's toolkit environments, or remove the ones no revision uses."""

from django.core.management.base import BaseCommand

from toolhub.lib import environments as envlib
from toolhub.packages.environments import environments_root
from toolhub.toolkits.models import Revision


class Command(BaseCommand):
    help = "List environments; with --prune, remove those no revision uses."

    def add_arguments(self, parser):
        parser.add_argument("--prune", action="store_true")

    def handle(self, *args, prune, **options):
        root = environments_root()
        used = set(Revision.objects.exclude(environment_key="").values_list("environment_key", flat=True))
        for info in envlib.list_environments(root):
            in_use = info.key in used
            self.stdout.write(f"{info.key}  {'in use' if in_use else 'unused'}")
            if prune and not in_use:
                envlib.remove_environment(root, info.key)
                self.stdout.write(f"  removed {info.key}")
