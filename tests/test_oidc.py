"""Sign-in with the organisation's identity provider (toolhub.accounts.oidc), through a real
OpenID Connect provider: django-oauth-toolkit's, run by tests/oidc_provider/serve.py in a second
process on loopback with its own SQLite. The whole code flow is real: discovery, the
authorization request with PKCE, the provider's sign-in, the code exchange, the ID token's
signature checked against the provider's JWKS, and the userinfo claims.

The provider's people: dana (example.org, groups sales and support), olga (example.org, the
admins' group), eve (elsewhere.test, a domain ToolHub does not allow) and frank (example.org,
deactivated in ToolHub)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from toolhub.accounts import oidc
from toolhub.accounts.models import Profile

REPO = Path(__file__).resolve().parent.parent
CLIENT_ID = "toolhub-test"
CLIENT_SECRET = "a-client-secret-for-the-test-only"
PEOPLE = [
    {"username": "dana", "email": "dana@example.org", "password": "dana-pw-1", "groups": ["sales", "support"]},
    {"username": "olga", "email": "olga@example.org", "password": "olga-pw-1", "groups": ["toolhub-admins"]},
    {"username": "eve", "email": "eve@elsewhere.test", "password": "eve-pw-1", "groups": ["sales"]},
    {"username": "frank", "email": "frank@example.org", "password": "frank-pw-1", "groups": []},
]
PASSWORDS = {p["username"]: p["password"] for p in PEOPLE}
User = get_user_model()


def _free_port() -> int:
    for port in range(18530, 18560):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port in 18530-18559")


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    directory = tmp_path_factory.mktemp("oidc-provider")
    port = _free_port()
    setup = directory / "setup.json"
    setup.write_text(json.dumps({
        "client": {"id": CLIENT_ID, "secret": CLIENT_SECRET, "redirect_uri": "http://testserver/oidc/callback/"},
        "people": PEOPLE,
    }))
    env = {
        **os.environ, "OIDC_PROVIDER_DIR": str(directory), "OIDC_PROVIDER_PORT": str(port),
        "OIDC_PROVIDER_SETUP": str(setup), "PYTHONPATH": str(REPO),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = (directory / "provider.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider.serve"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    issuer = f"http://127.0.0.1:{port}/o"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the OIDC provider did not start:\n" + (directory / "provider.log").read_text())
            time.sleep(0.2)
        yield issuer
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def oidc_on(provider, settings):
    settings.TOOLHUB_OIDC_ISSUER = provider
    settings.TOOLHUB_OIDC_PROVIDER_NAME = "Acme ID"
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.TOOLHUB_OIDC_ALLOWED_DOMAINS = ["example.org"]
    settings.TOOLHUB_OIDC_ADMIN_GROUPS = ["toolhub-admins"]
    settings.TOOLHUB_OIDC_AUTHOR_GROUPS = ["toolhub-authors"]
    settings.TOOLHUB_OIDC_CREATE_GROUPS = True
    settings.AUTHENTICATION_BACKENDS = [
        "toolhub.accounts.middleware.UserLanguageBackend", "toolhub.accounts.oidc.ToolHubOIDCBackend",
    ]
    oidc._discovered.clear()
    yield settings
    oidc._discovered.clear()


def sign_in(client: Client, username: str):
    """The browser's journey: ToolHub → the provider's authorization endpoint → its sign-in page
    → back to the authorization endpoint → ToolHub's callback. Returns ToolHub's answer to it."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302, start.content
    authorize = start["Location"]
    assert "code_challenge=" in authorize and f"client_id={CLIENT_ID}" in authorize
    browser = requests.Session()
    to_login = browser.get(authorize, allow_redirects=False)
    assert to_login.status_code == 302, to_login.text
    login_url = urljoin(authorize, to_login.headers["Location"])
    signed_in = browser.post(login_url, data={"username": username, "password": PASSWORDS[username]}, allow_redirects=False)
    assert signed_in.status_code == 302, signed_in.text
    back = browser.get(urljoin(authorize, signed_in.headers["Location"]), allow_redirects=False)
    assert back.status_code == 302, back.text
    callback = urlsplit(back.headers["Location"])
    assert callback.path == "/oidc/callback/" and "code=" in callback.query
    return client.get(f"{callback.path}?{callback.query}")


@pytest.mark.django_db
def test_a_first_sign_in_creates_the_person_with_the_groups_of_the_claim(oidc_on, client):
    response = sign_in(client, "dana")
    assert response.status_code == 302 and response["Location"] == "/toolkits/"
    dana = User.objects.get(email__iexact="dana@example.org")
    assert sorted(dana.groups.values_list("name", flat=True)) == ["sales", "support"]
    assert not dana.is_staff and not dana.has_usable_password()
    assert Profile.objects.get(user=dana).source == "oidc"
    assert client.get("/toolkits/").status_code == 200  # signed in


@pytest.mark.django_db
def test_a_later_sign_in_sets_groups_and_role_from_the_claims_again(oidc_on, client, admin):
    sign_in(client, "dana")
    dana = User.objects.get(email="dana@example.org")
    dana.groups.add(Group.objects.create(name="set-by-hand"))
    dana.is_staff = True
    dana.save()
    client.logout()
    sign_in(Client(), "dana")
    dana.refresh_from_db()
    assert sorted(dana.groups.values_list("name", flat=True)) == ["sales", "support"]
    assert not dana.is_staff


@pytest.mark.django_db
def test_the_claims_never_demote_the_last_active_admin(oidc_on, client):
    sign_in(client, "dana")
    User.objects.filter(email="dana@example.org").update(is_staff=True)
    sign_in(Client(), "dana")
    assert User.objects.get(email="dana@example.org").is_staff


@pytest.mark.django_db
def test_only_existing_groups_are_given_when_groups_are_not_created(oidc_on, client):
    oidc_on.TOOLHUB_OIDC_CREATE_GROUPS = False
    Group.objects.create(name="sales")
    sign_in(client, "dana")
    assert list(User.objects.get(email="dana@example.org").groups.values_list("name", flat=True)) == ["sales"]
    assert not Group.objects.filter(name="support").exists()


@pytest.mark.django_db
def test_the_admins_claim_makes_an_admin(oidc_on, client):
    sign_in(client, "olga")
    olga = User.objects.get(email="olga@example.org")
    assert olga.is_staff
    assert client.get("/people/").status_code == 200


@pytest.mark.django_db
def test_a_disallowed_domain_is_refused_with_a_clear_message(oidc_on, client):
    response = sign_in(client, "eve")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    page = client.get("/accounts/login/").content.decode()
    assert "Accounts of elsewhere.test may not sign in to ToolHub." in page
    assert not User.objects.filter(email__iexact="eve@elsewhere.test").exists()
    assert client.get("/toolkits/").status_code == 302


@pytest.mark.django_db
def test_a_person_deactivated_in_toolhub_is_refused(oidc_on, client):
    User.objects.create_user("frank", "Frank@Example.org", is_active=False)
    response = sign_in(client, "frank")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "This account is deactivated in ToolHub; ask an admin." in client.get("/accounts/login/").content.decode()
    assert not User.objects.get(username="frank").is_active
    assert User.objects.filter(email__iexact="frank@example.org").count() == 1


@pytest.mark.django_db
def test_a_local_person_with_the_same_email_is_the_same_person(oidc_on, client):
    local = User.objects.create_user("dana.local", "DANA@example.org", "a long pass 1")
    sign_in(client, "dana")
    assert User.objects.filter(email__iexact="dana@example.org").count() == 1
    assert Profile.objects.get(user=local).source == "oidc"


@pytest.mark.django_db
def test_the_login_page_offers_the_provider_in_the_visitors_language(oidc_on, client):
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Acme ID" in page and 'href="/oidc/authenticate/"' in page
    assert 'name="password"' in page
    french = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Se connecter avec Acme ID" in french


@pytest.mark.django_db
def test_with_local_passwords_off_only_the_provider_signs_in(oidc_on, client, carol):
    oidc_on.TOOLHUB_OIDC_LOCAL_PASSWORDS = False
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Acme ID" in page and 'name="password"' not in page
    assert client.post("/accounts/login/", {"username": "carol", "password": "pw-carol-1"}).status_code == 405
    assert client.get("/toolkits/").status_code == 302


@pytest.mark.django_db
def test_without_a_provider_there_is_no_button_and_the_urls_lead_to_the_login(client):
    page = client.get("/accounts/login/").content.decode()
    assert "/oidc/authenticate/" not in page
    assert client.get("/oidc/authenticate/")["Location"] == "/accounts/login/"
    assert client.get("/oidc/callback/?code=x&state=y")["Location"] == "/accounts/login/"
