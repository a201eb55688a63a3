"""Re-encrypt every model connection's API key and extra headers under the first key of
TOOLHUB_ENCRYPTION_KEYS: the companion of `rotate_encryption_keys` (valves). Run both before
dropping an old key. Each connection is re-encrypted in its own transaction, and only tokens
not yet under the first key are touched, so it is safe to interrupt and run again."""

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from toolhub.agents.models import ModelConnection
from toolhub.toolkits.valves import vault


class Command(BaseCommand):
    help = "Re-encrypt every model connection's key and headers under the first encryption key."

    def handle(self, *args: Any, **options: Any) -> None:
        v = vault()
        rotated = seen = 0
        for pk in ModelConnection.objects.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                row = ModelConnection.objects.select_for_update().filter(pk=pk).first()
                if row is None:
                    continue
                seen += 1
                changed = []
                for field in ("api_key_ciphertext", "headers_ciphertext"):
                    token = getattr(row, field)
                    if token and v.needs_rotation(token):
                        setattr(row, field, v.rotate(token))
                        changed.append(field)
                if changed:
                    row.save(update_fields=changed)
                    rotated += 1
        self.stdout.write(f"Re-encrypted {rotated} of {seen} model connections.")
