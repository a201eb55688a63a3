"""Valve values: stored encrypted per toolkit (admin Valves) and per toolkit and user
(UserValves). Plaintext exists only in memory, in the form being edited and on the stdin
of the one sandbox that runs the toolkit."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.translation import gettext as _

from toolhub.accounts.roles import is_admin
from toolhub.toolkits import schema_forms
from toolhub.toolkits.models import Revision, Toolkit, ValveSet
from toolhub.vault.crypto import EncryptionKeyError, Vault, parse_keys
from toolhub.vault.secret_fields import merge_submitted, secret_fields


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


def store_values(*, toolkit: Toolkit, values: dict[str, Any], user=None, by=None, shown_revision: int | None = None) -> None:
    """Store (encrypted) a toolkit's Valves (`user` None) or a person's UserValves. An admin
    saving the Valves entrusts the current revision with them: only the revision numbered
    `shown_revision` (the one the admin's form was made for) when it is given."""
    ValveSet.objects.update_or_create(
        toolkit=toolkit,
        user=user,
        defaults={"ciphertext": vault().encrypt_json(values), "updated_at": timezone.now(), "updated_by": by},
    )
    if user is None and by is not None and is_admin(by):
        toolkit.entrust_current_revision(by, number=shown_revision)


def _secret_names_by_toolkit(toolkit_ids: list[int]) -> dict[int, set[str]]:
    names: dict[int, set[str]] = {}
    rows = Revision.objects.filter(toolkit_id__in=toolkit_ids, valves_schema__isnull=False).values_list("toolkit_id", "valves_schema")
    for toolkit_id, schema in rows:
        names.setdefault(toolkit_id, set()).update(schema_secrets(schema))
    return names


def admin_secret_names(toolkit: Toolkit) -> set[str]:
    """The admin Valves that any revision of the toolkit declares secret: a new revision
    cannot make a stored secret an ordinary value by declaring its field plain."""
    return _secret_names_by_toolkit([toolkit.pk]).get(toolkit.pk, set())


def admin_secrets_by_toolkit(toolkit_ids: list[int]) -> dict[int, list[str]]:
    """For each toolkit, its secret admin Valves that hold a value (two queries in all)."""
    rows = ValveSet.objects.filter(toolkit_id__in=toolkit_ids, user__isnull=True).values_list("toolkit_id", "ciphertext")
    stored = {toolkit_id: vault().decrypt_json(ciphertext) for toolkit_id, ciphertext in rows}
    names = _secret_names_by_toolkit(list(stored)) if stored else {}
    return {
        toolkit_id: sorted(name for name in names.get(toolkit_id, ()) if values.get(name) not in (None, ""))
        for toolkit_id, values in stored.items()
    }


def admin_secrets_set(toolkit: Toolkit) -> list[str]:
    """The secret admin Valves of the toolkit that hold a value."""
    return admin_secrets_by_toolkit([toolkit.pk]).get(toolkit.pk, [])


def admin_values_for_run(*, toolkit: Toolkit, revision: Revision) -> dict[str, Any]:
    """The admin Valves a run of `revision` is handed: all of them when an admin uploaded or
    approved the revision, otherwise none of the secret ones."""
    values = load_values(toolkit=toolkit)
    if not values or revision.entrusted:
        return values
    withheld = admin_secret_names(toolkit)
    return {name: value for name, value in values.items() if name not in withheld}


def reset_values(*, toolkit: Toolkit, user) -> None:
    ValveSet.objects.filter(toolkit=toolkit, user=user).delete()


def schema_secrets(schema: dict | None) -> set[str]:
    return secret_fields(schema) if schema else set()


def values_save(
    *, toolkit: Toolkit, schema: dict, submitted: dict[str, Any], user=None, by=None, clear: set[str] | None = None,
    shown_revision: int | None = None,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Save submitted valve values, the one path for pages and the API: a secret sent as the
    mask (or left out) keeps its stored value, names in `clear` are emptied, the result is
    validated against the schema and stored only when valid. Returns the merged values and
    the per-field errors (empty when saved); messages never echo a submitted value. With
    `shown_revision`, nothing is saved unless that revision is still the current one."""
    if shown_revision is not None:
        current = Toolkit.objects.filter(pk=toolkit.pk).values_list("current_revision__number", flat=True).first()
        if current != shown_revision:
            message = _(
                "The toolkit's current revision changed (it is now revision %(now)s) since this form showed revision "
                "%(shown)s; nothing was saved. Look at the new revision and save again."
            )
            return {}, {schema_forms.ALL_ERRORS: [message % {"now": current, "shown": shown_revision}]}
    secrets = schema_secrets(schema)
    stored = load_values(toolkit=toolkit, user=user)
    values = merge_submitted(stored, submitted, secrets, clear or set())
    errors = schema_forms.validate(schema, values)
    if not errors:
        store_values(toolkit=toolkit, values=values, user=user, by=by, shown_revision=shown_revision)
    return values, errors
