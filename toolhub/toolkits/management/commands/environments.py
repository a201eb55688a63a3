"""List this host's toolkit environments, or remove the ones no revision uses."""

from django.core.management.base import BaseCommand

from toolhub.packages import envbuild as envlib
from toolhub.packages.environments import environments_root
from toolhub.toolkits.models import Revision


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class Command(BaseCommand):
    help = (
        "List this host's environments (key, in use or unused, size, last use). With --prune, "
        "remove those no revision uses, and what killed builds left behind."
    )

    def add_arguments(self, parser):
        parser.add_argument("--prune", action="store_true", help="remove unused environments and unfinished builds")

    def handle(self, *args, prune, **options):
        root = environments_root()
        used = set(Revision.objects.exclude(environment_key="").values_list("environment_key", flat=True))
        environments = envlib.list_environments(root)
        if not environments:
            self.stdout.write(f"No environments under {root}.")
        for info in environments:
            in_use = info.key in used
            self.stdout.write(
                f"{info.key}  {'in use' if in_use else 'unused'}  {_size(info.size_bytes)}  "
                f"last used {info.last_used_at:%Y-%m-%d %H:%M}"
            )
            if prune and not in_use:
                envlib.remove_environment(root, info.key)
                self.stdout.write(f"  removed {info.key}")
        if prune:
            # Builds in progress hold their key's lock and are spared.
            for name in envlib.remove_partial_builds(root):
                self.stdout.write(f"removed unfinished build {name}")
