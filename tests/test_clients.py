"""Client credentials: the admins' page and `/api/v1/clients`, and who a credential calls as
(toolhub.accounts.clients.resolve_caller, used by the API, MCP and the OpenAPI tool servers).

The people: admin creates credentials; alice and bob are users the Open WebUI app acts for;
carol is a plain user who may not manage credentials."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from toolhub.accounts import clients
from toolhub.accounts.models import ClientCredential

pytestmark = pytest.mark.django_db


def _post(client, path, body, **headers):
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def webui(admin):
    credential, raw = clients.client_create(name="Open WebUI production", acts_for_users=True, by=admin)
    return credential, raw


@pytest.fixture
def plain_app(admin):
    return clients.client_create(name="Batch jobs", by=admin)


# WHO A CREDENTIAL CALLS AS
# ------------------------------------------------------------------------------


def test_a_client_acts_for_the_user_its_header_names(webui, alice):
    _credential, raw = webui
    caller = clients.resolve_caller(token=raw, headers={"X-OpenWebUI-User-Email": "ALICE@example.org"})
    assert caller.user == alice and caller.client == webui[0]


def test_without_the_header_it_calls_as_itself(webui):
    caller = clients.resolve_caller(token=webui[1], headers={})
    assert caller.user == webui[0].service_user
    assert not caller.user.is_staff and not caller.user.has_usable_password()


def test_without_the_right_the_header_is_ignored(plain_app, alice):
    credential, raw = plain_app
    caller = clients.resolve_caller(token=raw, headers={"X-OpenWebUI-User-Email": "alice@example.org"})
    assert caller.user == credential.service_user != alice


def test_an_unknown_email_is_refused_with_403(webui):
    with pytest.raises(clients.CallerRefused) as info:
        clients.resolve_caller(token=webui[1], headers={"X-OpenWebUI-User-Email": "mallory@example.org"})
    assert info.value.status == 403
    assert not get_user_model().objects.filter(email="mallory@example.org").exists()


def test_an_unknown_email_becomes_a_user_when_the_admin_allowed_it(admin):
    _credential, raw = clients.client_create(name="LibreChat", acts_for_users=True, user_header="X-User-Email",
                                            create_users=True, by=admin)
    caller = clients.resolve_caller(token=raw, headers={"X-User-Email": "dave@example.org"})
    assert caller.user.email == "dave@example.org" and caller.user.username == "dave"
    assert not caller.user.has_usable_password()
    again = clients.resolve_caller(token=raw, headers={"X-User-Email": "dave@example.org"})
    assert again.user == caller.user


@pytest.mark.parametrize("value", ["not-an-email", "a@b.c\r\nX: y", "x" * 300 + "@example.org"])
def test_a_malformed_header_is_refused(webui, value):
    with pytest.raises(clients.CallerRefused) as info:
        clients.resolve_caller(token=webui[1], headers={"X-OpenWebUI-User-Email": value})
    assert info.value.status == 403


def test_a_deactivated_user_is_refused(webui, alice):
    alice.is_active = False
    alice.save()
    with pytest.raises(clients.CallerRefused) as info:
        clients.resolve_caller(token=webui[1], headers={"X-OpenWebUI-User-Email": "alice@example.org"})
    assert info.value.status == 403


def test_a_revoked_or_unknown_token_is_refused_with_401(webui):
    clients.client_revoke(client=webui[0])
    for token in (webui[1], "thc_nope", "", "x" * 5000):
        with pytest.raises(clients.CallerRefused) as info:
            clients.resolve_caller(token=token, headers={})
        assert info.value.status == 401


def test_a_persons_token_calls_as_that_person(alice, bearer):
    raw = bearer(alice)["HTTP_AUTHORIZATION"].removeprefix("Bearer ")
    assert clients.resolve_caller(token=raw, headers={"X-OpenWebUI-User-Email": "bob@example.org"}).user == alice


def test_a_client_is_found_with_one_query_and_a_person_too(plain_app, alice, bearer, django_assert_num_queries):
    # A client's token is never looked up among people's tokens (its prefix tells it apart).
    person = bearer(alice)["HTTP_AUTHORIZATION"].removeprefix("Bearer ")
    for token in (plain_app[1], person):
        clients.resolve_caller(token=token, headers={})  # the first use writes last_used_at
        with django_assert_num_queries(1):
            clients.resolve_caller(token=token, headers={})


def test_the_caller_is_the_user_as_stored_every_field(plain_app, alice, bearer):
    # resolve_caller reads the credential and its user with one plain statement: the user it
    # gives (request.user everywhere) must be the row as the ORM reads it.
    person = bearer(alice)["HTTP_AUTHORIZATION"].removeprefix("Bearer ")
    users = get_user_model()
    for token, expected in ((person, alice), (plain_app[1], plain_app[0].service_user)):
        found = clients.resolve_caller(token=token, headers={}).user
        stored = users.objects.get(pk=expected.pk)
        assert [getattr(found, f.attname) for f in users._meta.concrete_fields] == [
            getattr(stored, f.attname) for f in users._meta.concrete_fields
        ]
    caller = clients.resolve_caller(token=plain_app[1], headers={})
    assert caller.client.pk == plain_app[0].pk and caller.client.name == "Batch jobs"


def test_the_token_is_stored_hashed(webui):
    credential, raw = webui
    assert raw not in credential.digest and credential.prefix == raw[:11]


# THE API
# ------------------------------------------------------------------------------


def test_an_admin_creates_lists_and_revokes_a_client(client, admin, bearer, alice, upload):
    from tests.conftest import toolkit_source

    upload(alice, toolkit_source("Echo"))
    headers = bearer(admin)
    created = _post(client, "/api/v1/clients", {"name": "Open WebUI", "acts_for_users": True}, **headers)
    assert created.status_code == 201
    body = created.json()
    token = body["token"]
    assert token.startswith("thc_") and body["user_header"] == "X-OpenWebUI-User-Email" and body["acts_for_users"]
    listed = client.get("/api/v1/clients", **headers).json()["items"]
    assert [c["name"] for c in listed] == ["Open WebUI"]
    assert token not in json.dumps(listed) and "token" not in listed[0]
    # The credential works on the API, acting for alice.
    as_alice = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_X_OPENWEBUI_USER_EMAIL": "alice@example.org"}
    assert client.get("/api/v1/toolkits", **as_alice).status_code == 200
    unknown = client.get("/api/v1/toolkits", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_OPENWEBUI_USER_EMAIL="who@example.org")
    assert unknown.status_code == 403
    assert unknown.json()["errors"][0]["message"] == "No ToolHub user has this email; an admin must create one first."
    assert client.delete(f"/api/v1/clients/{body['id']}", **headers).status_code == 204
    revoked = client.get("/api/v1/toolkits", **as_alice)
    assert revoked.status_code == 401 and revoked.json()["errors"][0]["message"].startswith("The bearer token is not valid")
    anonymous = client.get("/api/v1/toolkits")
    assert anonymous.status_code == 401 and anonymous.json()["errors"][0]["message"].startswith("Authentication required")
    assert client.get("/api/v1/clients", **headers).json()["items"] == []
    assert client.delete(f"/api/v1/clients/{body['id']}", **headers).status_code == 404


def test_an_acting_credential_cannot_reach_anyones_settings(client, admin, alice, bob, upload, webui):
    """UserValves are managed by their person in the dashboard or with their own token; an
    app's credential only calls tools (which run with the person's UserValves)."""
    from tests.conftest import toolkit_source
    from toolhub.toolkits import valves

    toolkit = upload(alice, toolkit_source("Echo"))
    valves.store_values(toolkit=toolkit, values={"city": "Lyon"}, user=alice)
    token = webui[1]
    for email in ("alice@example.org", "bob@example.org", None):
        extra = {"HTTP_X_OPENWEBUI_USER_EMAIL": email} if email else {}
        read = client.get("/api/v1/toolkits/echo/user-valves", HTTP_AUTHORIZATION=f"Bearer {token}", **extra)
        assert read.status_code == 403
        assert read.json()["errors"][0]["message"].startswith("A client credential cannot do this")
        write = client.put("/api/v1/toolkits/echo/user-valves", data=json.dumps({"values": {"city": "Paris"}}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **extra)
        assert write.status_code == 403
    assert valves.load_values(toolkit=toolkit, user=alice) == {"city": "Lyon"}


def test_client_names_and_headers_are_checked(client, admin, bearer, webui):
    headers = bearer(admin)
    taken = _post(client, "/api/v1/clients", {"name": "Open WebUI production"}, **headers)
    assert taken.status_code == 409 and taken.json()["errors"][0]["field"] == "name"
    bad = _post(client, "/api/v1/clients", {"name": "X", "acts_for_users": True, "user_header": "Bad Header:"}, **headers)
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "user_header"
    assert _post(client, "/api/v1/clients", {"name": ""}, **headers).status_code == 400
    assert _post(client, "/api/v1/clients", {"name": "y" * 101}, **headers).status_code == 400


def test_only_admins_manage_clients(client, carol, bearer, webui):
    headers = bearer(carol)
    assert client.get("/api/v1/clients", **headers).status_code == 404
    assert _post(client, "/api/v1/clients", {"name": "Mine"}, **headers).status_code == 404
    assert client.delete(f"/api/v1/clients/{webui[0].pk}", **headers).status_code == 404
    assert client.get("/api/v1/clients").status_code == 401
    assert ClientCredential.objects.active().count() == 1


# THE PAGE
# ------------------------------------------------------------------------------


def test_the_page_shows_a_new_token_once(client, admin):
    client.force_login(admin)
    response = client.post("/clients/", {"name": "Open WebUI", "acts_for_users": "on", "user_header": "X-OpenWebUI-User-Email"})
    assert response.status_code == 200
    body = response.content.decode()
    credential = ClientCredential.objects.get()
    start = body.index('id="new-token">') + len('id="new-token">')
    token = body[start:body.index("</pre>", start)]
    assert token.startswith("thc_") and credential.acts_for_users
    assert response["Cache-Control"].startswith("max-age=0")
    again = client.get("/clients/").content.decode()
    assert token not in again and "Open WebUI" in again and credential.prefix in again


def test_the_page_reports_a_taken_name(client, admin, webui):
    client.force_login(admin)
    response = client.post("/clients/", {"name": "Open WebUI production"})
    assert response.status_code == 400 and "A client with this name exists." in response.content.decode()


def test_the_page_revokes(client, admin, webui):
    client.force_login(admin)
    assert client.post(f"/clients/{webui[0].pk}/revoke/").status_code == 302
    webui[0].refresh_from_db()
    assert not webui[0].is_active
    assert client.get(f"/clients/{webui[0].pk}/revoke/").status_code == 405


def test_the_page_is_for_admins_only(client, carol, webui):
    assert client.get("/clients/").status_code == 302
    client.force_login(carol)
    assert client.get("/clients/").status_code == 404
    assert client.post("/clients/", {"name": "Mine"}).status_code == 404
    assert client.post(f"/clients/{webui[0].pk}/revoke/").status_code == 404
    webui[0].refresh_from_db()
    assert webui[0].is_active


def test_the_page_pins_its_query_count(client, admin, django_assert_max_num_queries):
    for n in range(5):
        clients.client_create(name=f"App {n}", by=admin)
    client.force_login(admin)
    with django_assert_max_num_queries(6):
        assert client.get("/clients/").status_code == 200
