"""The Overview says which secrets a toolkit's code receives: the secret fields of
its admin Valves and of each user's UserValves, and that the code gets them in plain text."""

from __future__ import annotations

import pytest

from tests.conftest import example
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db


@pytest.fixture
def toolkit(upload, alice):
    toolkit = upload(alice, example("string_reverse"))
    revision = toolkit.current_revision
    revision.valves_schema = {"type": "object", "properties": {
        "org_api_key": {"type": "string"}, "base_url": {"type": "string"}, "token": {"type": "string", "format": "password"},
    }}
    revision.user_valves_schema = {"type": "object", "properties": {"personal_password": {"type": "string"}, "style": {"type": "string"}}}
    revision.set_status(Status.READY)
    revision.save()
    return toolkit


@pytest.mark.parametrize("who", ["carol", "alice", "admin"])
def test_the_overview_lists_the_secrets_the_code_receives(client, toolkit, who, request):
    client.force_login(request.getfixturevalue(who))
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    box = html.split('id="received-secrets"')[1].split("</div>")[0]
    assert "Secrets this toolkit&#x27;s code receives" in box or "Secrets this toolkit's code receives" in box
    admin_line = box.split("Valves set by admins, shared by every user:")[1].split("</li>")[0]
    assert "<code>org_api_key</code>" in admin_line and "<code>token</code>" in admin_line
    assert "base_url" not in box
    assert "<code>personal_password</code>" in box.split("Each user&#x27;s own UserValves:")[-1] or "<code>personal_password</code>" in box
    assert "style" not in box
    assert "plain text" in box


def test_a_toolkit_without_secret_settings_shows_no_box(client, upload, alice, carol):
    toolkit = upload(alice, example("string_reverse"), slug="no_secrets")
    client.force_login(carol)
    assert 'id="received-secrets"' not in client.get(f"/toolkits/{toolkit.slug}/").content.decode()


def test_the_box_is_translated(client, toolkit, carol):
    client.force_login(carol)
    client.cookies["django_language"] = "fr"
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    assert 'id="received-secrets"' in html and "plain text" not in html
