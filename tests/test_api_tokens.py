"""The API tokens page (/account/tokens/), revoking a token, and `manage.py create_api_token`.

People (see conftest): alice and bob are toolkit authors, carol is a plain user; every
signed-in user may hold tokens.
"""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from toolhub.accounts.models import ApiToken

pytestmark = pytest.mark.django_db

URL = reverse("api_tokens")


def _raw_token(body: str) -> str:
    match = re.search(r'<pre class="token" id="new-token">([^<]+)</pre>', body)
    assert match, "the new token is not on the page"
    return match.group(1)


def _bearer_get(raw: str, path: str = "/api/v1/toolkits"):
    return Client().get(path, headers={"Authorization": f"Bearer {raw}"})


def test_it_lists_no_tokens_at_first(client, carol):
    client.force_login(carol)
    response = client.get(URL)
    assert response.status_code == 200
    assert "You have no API tokens." in response.content.decode()
    assert 'id="new-token"' not in response.content.decode()


def test_it_creates_a_token_and_shows_it_once(client, carol):
    client.force_login(carol)
    response = client.post(URL, {"name": "CI pipeline"})
    assert response.status_code == 200
    raw = _raw_token(response.content.decode())
    assert raw.startswith("th_")
    token = ApiToken.objects.get()
    assert token.user == carol
    assert token.name == "CI pipeline"
    # Later pages name the token but never show it again.
    later = client.get(URL).content.decode()
    assert "CI pipeline" in later
    assert raw not in later
    assert 'id="new-token"' not in later
    assert f"{token.prefix}…" in later


def test_it_stores_only_a_hash_of_the_token(client, carol):
    client.force_login(carol)
    raw = _raw_token(client.post(URL, {"name": "t"}).content.decode())
    token = ApiToken.objects.get()
    assert token.digest == hashlib.sha256(raw.encode()).hexdigest()
    stored = [str(value) for value in ApiToken.objects.values_list().get()]
    assert raw not in stored
    assert len(token.prefix) < len(raw) // 2


def test_the_token_authenticates_its_user(client, carol):
    client.force_login(carol)
    raw = _raw_token(client.post(URL, {"name": "t"}).content.decode())
    assert _bearer_get(raw).status_code == 200


def test_it_names_an_unnamed_token(client, carol):
    client.force_login(carol)
    client.post(URL, {"name": "  "})
    assert ApiToken.objects.get().name == "Unnamed token"


def test_it_shows_only_the_users_own_tokens(client, alice, carol):
    ApiToken.issue(user=alice, name="alice-secret-name")
    client.force_login(carol)
    assert "alice-secret-name" not in client.get(URL).content.decode()


def test_it_escapes_the_token_name(client, carol):
    client.force_login(carol)
    client.post(URL, {"name": "<b>bold</b>"})
    body = client.get(URL).content.decode()
    assert "<b>bold</b>" not in body
    assert "&lt;b&gt;bold&lt;/b&gt;" in body


def test_it_redirects_anonymous_users_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert client.post(URL, {"name": "x"}).status_code == 302
    assert not ApiToken.objects.exists()


def test_it_rejects_put(client, carol):
    client.force_login(carol)
    assert client.put(URL).status_code == 405


def test_it_links_to_the_api_reference(client, carol):
    client.force_login(carol)
    assert "/api/v1/docs" in client.get(URL).content.decode()
    assert client.get("/api/v1/docs").status_code == 200


# -- Revoke -----------------------------------------------------------------------------------


def _revoke_url(token: ApiToken) -> str:
    return reverse("api_token_revoke", args=[token.pk])


def test_it_revokes_a_token(client, carol):
    token, raw = ApiToken.issue(user=carol, name="t")
    client.force_login(carol)
    response = client.post(_revoke_url(token))
    assert response.status_code == 302
    assert response["Location"] == URL
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert _bearer_get(raw).status_code == 401
    body = client.get(URL).content.decode()
    assert "Token t revoked." in body
    assert "revoked" in body


def test_revoking_twice_keeps_the_first_time(client, carol):
    token, _raw = ApiToken.issue(user=carol, name="t")
    client.force_login(carol)
    client.post(_revoke_url(token))
    token.refresh_from_db()
    first = token.revoked_at
    client.post(_revoke_url(token))
    token.refresh_from_db()
    assert token.revoked_at == first


def test_revoke_rejects_get(client, carol):
    token, _raw = ApiToken.issue(user=carol, name="t")
    client.force_login(carol)
    assert client.get(_revoke_url(token)).status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoking_another_users_token_answers_404(client, alice, carol):
    token, raw = ApiToken.issue(user=alice, name="t")
    client.force_login(carol)
    assert client.post(_revoke_url(token)).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert _bearer_get(raw).status_code == 200


def test_revoking_an_unknown_token_answers_404(client, carol):
    client.force_login(carol)
    assert client.post(reverse("api_token_revoke", args=[999])).status_code == 404


def test_revoke_redirects_anonymous_users_to_login(client, carol):
    token, _raw = ApiToken.issue(user=carol, name="t")
    response = client.post(_revoke_url(token))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    token.refresh_from_db()
    assert token.revoked_at is None


# -- manage.py create_api_token ---------------------------------------------------------------


def test_the_command_prints_the_token_alone_on_its_last_line(alice):
    out = io.StringIO()
    call_command("create_api_token", "alice", stdout=out)
    last = out.getvalue().rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"th_[A-Za-z0-9_-]+", last)
    token = ApiToken.objects.get()
    assert token.user == alice
    assert token.digest == hashlib.sha256(last.encode()).hexdigest()
    response = _bearer_get(last)
    assert response.status_code == 200


def test_the_command_takes_a_token_name(alice):
    call_command("create_api_token", "alice", "--name", "deploy", stdout=io.StringIO())
    assert ApiToken.objects.get().name == "deploy"


def test_the_command_refuses_an_unknown_user():
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_api_token", "nobody", stdout=io.StringIO())
    assert not ApiToken.objects.exists()


def test_no_cache_keeps_the_page_with_the_new_token(client, carol):
    client.force_login(carol)
    response = client.post(URL, {"name": "t"})
    assert "no-store" in response["Cache-Control"]


def test_it_explains_how_to_send_the_token(client, carol):
    client.force_login(carol)
    body = client.get(URL).content.decode()
    # Escaped, so a browser shows the placeholder instead of swallowing it as a tag.
    assert "Authorization: Bearer &lt;token&gt;" in body
