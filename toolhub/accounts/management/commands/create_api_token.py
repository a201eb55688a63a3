from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from toolhub.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for a user; the token is printed alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="command line")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        _token, raw = ApiToken.issue(user=user, name=name)
        self.stdout.write(f"Token for {username} (store it now; it is not shown again):")
        self.stdout.write(raw)
