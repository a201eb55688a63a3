"""Create (or keep) the first admin. Prints how to log in; a generated password is shown
once, when the account is created."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the first admin user if it does not exist."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--email", default="admin@localhost")
        parser.add_argument("--password", default=None, help="Defaults to a random password, printed once.")

    def handle(self, *args, username, email, password, **options):
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is not None:
            # Never reset a password or promote someone: running `make run` again must
            # leave existing accounts alone.
            if user.is_staff:
                self.stdout.write(f"Admin {username!r} exists already; log in with its password.")
            else:
                self.stdout.write(f"A user {username!r} exists already and is not an admin; nothing was changed.")
            return
        password = password or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email=email, password=password)
        self.stdout.write(self.style.SUCCESS(f"Created admin {username!r} with password: {password}"))
