"""Re-encrypt every stored valve value under the first key of TOOLHUB_ENCRYPTION_KEYS.

Put the new key first and keep the old ones after it, run this, then drop the old keys.
It works in batches, each in its own transaction, and only touches rows not yet under
the first key, so it is safe to interrupt and run again."""

from django.core.management.base import BaseCommand
from django.db import transaction

from toolhub.toolkits.models import ValveSet
from toolhub.toolkits.valves import vault


class Command(BaseCommand):
    help = "Re-encrypt every valve value under the first encryption key."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=200)

    def handle(self, *args, batch_size, **options):
        v = vault()
        rotated = seen = 0
        last_pk = 0
        while True:
            with transaction.atomic():
                rows = list(ValveSet.objects.select_for_update().filter(pk__gt=last_pk).order_by("pk")[:batch_size])
                if not rows:
                    break
                for row in rows:
                    seen += 1
                    if v.needs_rotation(row.ciphertext):
                        row.ciphertext = v.rotate(row.ciphertext)
                        row.save(update_fields=["ciphertext"])
                        rotated += 1
                last_pk = rows[-1].pk
        self.stdout.write(f"Re-encrypted {rotated} of {seen} valve sets.")
