"""Import every `.py` file below a folder as a toolkit (as RAGFlow loads its plugin folder):
one line per file with its verdict. Safe to run again: an unchanged file adds no revision."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from toolhub.toolkits.bulk import LOADED, REFUSED, UNCHANGED, import_folder


class Command(BaseCommand):
    help = "Import every .py file below PATH as a toolkit (slug: the file name), one line per file."

    def add_arguments(self, parser):
        parser.add_argument("path", help="a folder (searched recursively) or one .py file")
        parser.add_argument("--owner", help="username of the new toolkits' owner (default: the first admin)")

    def handle(self, *args, **options):
        root = Path(options["path"])
        if not root.exists():
            raise CommandError(f"{root} does not exist.")
        users = get_user_model().objects
        if options["owner"]:
            owner = users.filter(username=options["owner"]).first()
            if owner is None:
                raise CommandError(f"There is no user {options['owner']!r}.")
        else:
            owner = users.filter(is_superuser=True).order_by("pk").first()
            if owner is None:
                raise CommandError("Create an admin first (manage.py create_admin), or name an --owner.")
        counts = {LOADED: 0, UNCHANGED: 0, REFUSED: 0}
        try:
            for verdict in import_folder(root, user=owner):
                counts[verdict.outcome] += 1
                write = self.stderr.write if verdict.outcome == REFUSED else self.stdout.write
                write(verdict.log_line())
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{counts[LOADED]} loaded, {counts[UNCHANGED]} unchanged, {counts[REFUSED]} refused")
        if counts[REFUSED]:
            raise CommandError(f"{counts[REFUSED]} file(s) refused")
