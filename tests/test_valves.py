"""Valves (admins) and UserValves (each user for themself): forms from the schemas, every
value encrypted at rest, secrets never shown back."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from pydantic import BaseModel, Field, SecretStr

from tests.conftest import REPO, example
from toolhub.accounts.models import ApiToken
from toolhub.toolkits import valves
from toolhub.toolkits.models import Status, ValveSet
from toolhub.toolkits.valves import _vault_for

SECRET = "sk-test-super-secret-4242"


class _Valves(BaseModel):
    api_key: str = Field("", description="Your API key here")
    region: str = Field("eu", description="Where to send calls")
    retries: int = Field(2, ge=0, le=5)


class _UserValves(BaseModel):
    token: SecretStr = Field(SecretStr(""), description="Personal token")
    style: str = Field("short", json_schema_extra={"enum": ["short", "long"]})


@pytest.fixture
def toolkit(upload, alice):
    """A ready toolkit whose schemas were made here (standing in for the sandbox's
    introspection, which tests/test_invocations.py covers for real)."""
    toolkit = upload(alice, example("string_reverse"))
    revision = toolkit.current_revision
    revision.valves_schema = _Valves.model_json_schema()
    revision.user_valves_schema = _UserValves.model_json_schema()
    revision.set_status(Status.READY)
    revision.save()
    return toolkit


def _bearer(user):
    _token, raw = ApiToken.issue(user=user, name="t")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _valves_url(toolkit):
    return f"/toolkits/{toolkit.slug}/valves/"


def _settings_url(toolkit):
    return f"/toolkits/{toolkit.slug}/settings/"


# ENCRYPTION AT REST
# ------------------------------------------------------------------------------


def _raw_rows() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ciphertext FROM toolkits_valveset")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_it_stores_no_plaintext_value_secret_or_not(client, admin, carol, toolkit):
    client.force_login(admin)
    client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "antarctica-1", "retries": "3"})
    client.force_login(carol)
    client.post(_settings_url(toolkit), {"token": "carol-token-777", "style": "long"})
    rows = _raw_rows()
    assert len(rows) == 2
    for raw in rows:
        for plain in (SECRET, "antarctica-1", "carol-token-777", "long", '"retries"'):
            assert plain not in raw
    assert valves.load_values(toolkit=toolkit)["api_key"] == SECRET
    assert valves.load_values(toolkit=toolkit, user=carol) == {"token": "carol-token-777", "style": "long"}


@pytest.mark.django_db
def test_rotation_keeps_every_value_readable_after_the_old_key_is_dropped(toolkit, carol, settings):
    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLHUB_ENCRYPTION_KEYS = key_a
    valves.store_values(toolkit=toolkit, values={"api_key": SECRET})
    valves.store_values(toolkit=toolkit, user=carol, values={"style": "long"})
    settings.TOOLHUB_ENCRYPTION_KEYS = f"{key_b},{key_a}"
    call_command("rotate_encryption_keys", "--batch-size", "1", stdout=open(os.devnull, "w"))
    # Running it again is harmless: nothing is left under the old key.
    call_command("rotate_encryption_keys", stdout=open(os.devnull, "w"))
    settings.TOOLHUB_ENCRYPTION_KEYS = key_b
    _vault_for.cache_clear()
    assert valves.load_values(toolkit=toolkit) == {"api_key": SECRET}
    assert valves.load_values(toolkit=toolkit, user=carol) == {"style": "long"}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [("", "TOOLHUB_ENCRYPTION_KEYS"), ("not-a-key", "Fernet.generate_key")],
)
def test_it_refuses_to_start_with_a_missing_or_malformed_key(keys, expected):
    env = dict(os.environ, TOOLHUB_ENCRYPTION_KEYS=keys, DJANGO_SETTINGS_MODULE="toolhub.settings",
               TOOLHUB_TESTING="1", TOOLHUB_ENV_FILE="/nonexistent")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert expected in result.stderr
    assert "not-a-key" not in result.stderr


# THE FORMS
# ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_valves_form_is_built_from_the_schema(client, admin, toolkit):
    client.force_login(admin)
    response = client.get(_valves_url(toolkit))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'type="password"' in html  # api_key looks like a credential
    assert 'name="region"' in html and 'value="eu"' in html
    assert 'min="0"' in html and 'max="5"' in html
    assert "not set" in html


@pytest.mark.django_db
def test_a_secret_is_never_shown_back_and_the_mask_keeps_it(client, admin, toolkit):
    client.force_login(admin)
    client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "2"})
    page = client.get(_valves_url(toolkit)).content.decode()
    assert SECRET not in page
    assert ">set<" in page
    # Saving again without typing the secret keeps it.
    client.post(_valves_url(toolkit), {"api_key": "", "region": "us", "retries": "2"})
    assert valves.load_values(toolkit=toolkit) == {"api_key": SECRET, "region": "us", "retries": 2}
    # Clearing is an explicit action.
    client.post(_valves_url(toolkit), {"api_key": "", "api_key__clear": "on", "region": "us", "retries": "2"})
    assert not valves.load_values(toolkit=toolkit).get("api_key")


@pytest.mark.django_db
def test_invalid_values_get_per_field_errors_and_nothing_is_saved(client, admin, toolkit):
    client.force_login(admin)
    response = client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "9"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "errorlist" in html
    assert not ValveSet.objects.exists()


@pytest.mark.django_db
def test_a_secret_typed_in_a_rejected_submit_is_kept_for_that_response_only(client, admin, toolkit, caplog):
    caplog.set_level(logging.DEBUG)
    client.force_login(admin)
    response = client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "9"})
    html = response.content.decode()
    # Put back in its password input, said so, and the page is never cached.
    assert f'type="password" name="api_key" id="id_api_key" value="{SECRET}"' in html
    assert "typed, not saved yet" in html
    assert "no-store" in response["Cache-Control"]
    assert html.count(SECRET) == 1
    assert SECRET not in caplog.text
    # Nothing was stored, so the next page has neither the secret nor a "set" state.
    page = client.get(_valves_url(toolkit)).content.decode()
    assert SECRET not in page and "not set" in page
    # Fixing the other field and sending the kept secret saves both.
    client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "3"})
    assert valves.load_values(toolkit=toolkit) == {"api_key": SECRET, "region": "eu", "retries": 3}


@pytest.mark.django_db
def test_a_rejected_submit_keeps_no_secret_it_was_asked_to_clear_and_no_mask(client, admin, toolkit):
    client.force_login(admin)
    client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "2"})
    cleared = client.post(_valves_url(toolkit), {"api_key": "other-typed", "api_key__clear": "on", "retries": "9"})
    assert "other-typed" not in cleared.content.decode()
    masked = client.post(_valves_url(toolkit), {"api_key": "********", "retries": "9"}).content.decode()
    assert 'value="********"' not in masked and SECRET not in masked


@pytest.mark.django_db
def test_labels_are_titles_with_descriptions_and_secrets_have_a_show_toggle(client, admin, toolkit):
    revision = toolkit.current_revision
    revision.valves_schema = {
        "type": "object",
        "properties": {
            "api_key": {"type": "string", "title": "Service key", "description": "From the service's settings page"},
            "maxRetryCount": {"type": "integer"},
        },
    }
    revision.save()
    client.force_login(admin)
    html = client.get(_valves_url(toolkit)).content.decode()
    assert '<label for="id_api_key">Service key</label>' in html
    assert '<p class="help" id="id_api_key_help">From the service&#x27;s settings page</p>' in html
    assert 'aria-describedby="id_api_key_state id_api_key_help"' in html
    # No title: the name made readable.
    assert '<label for="id_maxRetryCount">Max retry count</label>' in html
    # The toggle: a real button, tied to its input, off at first (static/js/toolhub.js unhides it).
    assert ('<button type="button" class="small secret-toggle" data-secret-toggle aria-controls="id_api_key" '
            'aria-pressed="false" hidden>Show<span class="visually-hidden"> Service key</span></button>') in html
    assert html.count("data-secret-toggle") == 1


@pytest.mark.django_db
def test_values_that_no_longer_fit_a_new_schema_are_flagged(client, admin, toolkit):
    valves.store_values(toolkit=toolkit, values={"api_key": "x", "region": "eu", "retries": 4})
    revision = toolkit.current_revision
    schema = _Valves.model_json_schema()
    schema["properties"]["retries"]["maximum"] = 3
    revision.valves_schema = schema
    revision.save()
    client.force_login(admin)
    html = client.get(_valves_url(toolkit)).content.decode()
    assert "no longer fit" in html


# AUTHORISATION: admin / author / user / anonymous × Valves / UserValves × read / write
# ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "valves_read", "valves_write"),
    [("admin", 200, 302), ("alice", 404, 404), ("carol", 404, 404)],
)
def test_valves_page_authorisation(client, request, toolkit, who, valves_read, valves_write):
    client.force_login(request.getfixturevalue(who))
    assert client.get(_valves_url(toolkit)).status_code == valves_read
    assert client.post(_valves_url(toolkit), {"api_key": "x", "region": "eu", "retries": "1"}).status_code == valves_write


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice", "carol"])
def test_every_user_edits_their_own_user_valves(client, request, toolkit, who):
    user = request.getfixturevalue(who)
    client.force_login(user)
    assert client.get(_settings_url(toolkit)).status_code == 200
    assert client.post(_settings_url(toolkit), {"style": "long"}).status_code == 302
    assert valves.load_values(toolkit=toolkit, user=user) == {"style": "long"}


@pytest.mark.django_db
def test_anonymous_is_sent_to_login(client, toolkit):
    for url in (_valves_url(toolkit), _settings_url(toolkit)):
        assert client.get(url).status_code == 302
        assert client.post(url, {"style": "long"}).status_code == 302
    assert not ValveSet.objects.exists()


@pytest.mark.django_db
def test_settings_pages_reject_other_methods(client, admin, toolkit):
    client.force_login(admin)
    assert client.put(_valves_url(toolkit)).status_code == 405
    assert client.delete(_settings_url(toolkit)).status_code == 405


@pytest.mark.django_db
def test_user_b_never_reaches_user_a_values(client, alice, carol, toolkit):
    valves.store_values(toolkit=toolkit, user=carol, values={"token": "carol-secret-123", "style": "long"})
    client.force_login(alice)
    page = client.get(_settings_url(toolkit)).content.decode()
    assert "carol-secret-123" not in page
    assert 'selected>long' not in page.replace('"', "")
    api = client.get(f"/api/v1/toolkits/{toolkit.slug}/user-valves", **_bearer(alice)).json()
    assert api == {"values": {}, "secrets": {"token": False}}


@pytest.mark.django_db
def test_admins_reset_a_users_settings_without_reading_them(client, admin, carol, toolkit):
    valves.store_values(toolkit=toolkit, user=carol, values={"token": "carol-secret-123", "style": "long"})
    client.force_login(admin)
    page = client.get(_valves_url(toolkit)).content.decode()
    assert "carol" in page and "carol-secret-123" not in page
    response = client.post(_valves_url(toolkit), {"action": "reset_user", "user": carol.pk})
    assert response.status_code == 302
    assert valves.load_values(toolkit=toolkit, user=carol) == {}


# THE API
# ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_masks_secrets_and_keeps_them_when_the_mask_is_sent(client, admin, toolkit):
    headers = _bearer(admin)
    url = f"/api/v1/toolkits/{toolkit.slug}/valves"
    response = client.put(url, {"values": {"api_key": SECRET, "region": "eu"}}, content_type="application/json", **headers)
    assert response.status_code == 200
    assert response.json() == {"values": {"api_key": "********", "region": "eu"}, "secrets": {"api_key": True}}
    client.put(url, {"values": {"api_key": "********", "region": "us"}}, content_type="application/json", **headers)
    assert valves.load_values(toolkit=toolkit)["api_key"] == SECRET
    assert SECRET not in client.get(url, **headers).content.decode()


@pytest.mark.django_db
def test_api_rejects_invalid_values_per_field_without_echoing_them(client, admin, toolkit):
    url = f"/api/v1/toolkits/{toolkit.slug}/valves"
    response = client.put(url, {"values": {"api_key": SECRET, "retries": 99}}, content_type="application/json", **_bearer(admin))
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["retries"]
    assert SECRET not in response.content.decode()
    assert not ValveSet.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("who", "status"), [("admin", 200), ("alice", 404), ("carol", 404)])
def test_api_valves_are_for_admins_only(client, request, toolkit, who, status):
    headers = _bearer(request.getfixturevalue(who))
    url = f"/api/v1/toolkits/{toolkit.slug}/valves"
    assert client.get(url, **headers).status_code == status
    assert client.put(url, {"values": {"region": "x"}}, content_type="application/json", **headers).status_code == status


@pytest.mark.django_db
def test_api_valves_refuse_anonymous(client, toolkit):
    assert client.get(f"/api/v1/toolkits/{toolkit.slug}/valves").status_code == 401
    assert client.get(f"/api/v1/toolkits/{toolkit.slug}/user-valves").status_code == 401


# A KNOWN SECRET APPEARS NOWHERE
# ------------------------------------------------------------------------------


@pytest.mark.django_db
@override_settings(DEBUG=False)
def test_a_known_secret_appears_in_no_page_response_or_log(client, admin, carol, toolkit, caplog):
    caplog.set_level(logging.DEBUG)
    client.force_login(admin)
    client.post(_valves_url(toolkit), {"api_key": SECRET, "region": "eu", "retries": "1"})
    client.post(_valves_url(toolkit), {"api_key": "", "region": "eu", "retries": "99"})  # an error page
    client.force_login(carol)
    client.post(_settings_url(toolkit), {"token": SECRET, "style": "long"})
    seen = []
    for user in (admin, carol):
        client.force_login(user)
        headers = _bearer(user)
        for url in (f"/toolkits/{toolkit.slug}/", _valves_url(toolkit), _settings_url(toolkit),
                    f"/toolkits/{toolkit.slug}/tools/", f"/toolkits/{toolkit.slug}/environment/", "/toolkits/"):
            seen.append(client.get(url).content.decode())
        for url in (f"/api/v1/toolkits/{toolkit.slug}", f"/api/v1/toolkits/{toolkit.slug}/valves",
                    f"/api/v1/toolkits/{toolkit.slug}/user-valves", "/api/v1/toolkits"):
            seen.append(client.get(url, **headers).content.decode())
    client.force_login(admin)
    seen.append(client.get("/admin/toolkits/valveset/").content.decode())
    for text in seen:
        assert SECRET not in text
    assert SECRET not in caplog.text


@pytest.mark.django_db
def test_fields_keep_the_order_the_toolkit_declared(client, admin, toolkit):
    # PostgreSQL's jsonb would sort the schema's properties; the form must not.
    toolkit.current_revision.refresh_from_db()
    assert list(toolkit.current_revision.valves_schema["properties"]) == ["api_key", "region", "retries"]
    client.force_login(admin)
    html = client.get(_valves_url(toolkit)).content.decode()
    assert html.index('name="api_key"') < html.index('name="region"') < html.index('name="retries"')
