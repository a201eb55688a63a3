"""Valve values: stored encrypted per toolkit (admin Valves) and per toolkit and user
(UserValves). Plaintext exists only in memory, in the form being edited and on the stdin
of the one sandbox that runs the toolkit."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from toolhub.toolkits.models import Toolkit, ValveSet
from toolhub.vault.crypto import EncryptionKeyError, Vault, parse_keys
from toolhub.vault.secret_fields import secret_fields


def check_encryption_settings() -> None:
    try:
        parse_keys(settings.TOOLHUB_ENCRYPTION_KEYS)
    except EncryptionKeyError as exc:
        raise ImproperlyConfigured(f"TOOLHUB_ENCRYPTION_KEYS: {exc}") from None


@lru_cache(maxsize=4)
def _vault_for(keys: str) -> Vault:
    return Vault(parse_keys(keys))


def vault() -> Vault:
    return _vault_for(settings.TOOLHUB_ENCRYPTION_KEYS)


def load_values(*, toolkit: Toolkit, user=None) -> dict[str, Any]:
    row = ValveSet.objects.filter(toolkit=toolkit, user=user).first()
    return vault().decrypt_json(row.ciphertext) if row else {}


def store_values(*, toolkit: Toolkit, values: dict[str, Any], user=None, by=None) -> None:
    ValveSet.objects.update_or_create(
        toolkit=toolkit,
        user=user,
        defaults={"ciphertext": vault().encrypt_json(values), "updated_at": timezone.now(), "updated_by": by},
    )


def reset_values(*, toolkit: Toolkit, user) -> None:
    ValveSet.objects.filter(toolkit=toolkit, user=user).delete()


def schema_secrets(schema: dict | None) -> set[str]:
    return secret_fields(schema) if schema else set()
