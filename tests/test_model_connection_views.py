"""The model connection pages (admins only) and the "Test connection" button, against a real
OpenAI-compatible server through the real `openai` client.

People (see conftest): admin is staff; carol is a plain user, who gets 404 everywhere here.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from toolhub.agents import services
from toolhub.agents.models import ModelConnection, Use

pytestmark = pytest.mark.django_db

KEY = "sk-page-0123456789abcdef"


@pytest.fixture
def connection(admin):
    return services.connection_create(
        data=services.ConnectionInput(
            name="Team vLLM", base_url="http://127.0.0.1:8000/v1", models=["qwen2.5"], api_key=KEY,
            headers={"X-Org": "org-secret-value"},
        ),
        by=admin,
    )


@pytest.fixture
def as_admin(client, admin):
    client.force_login(admin)
    return client


@pytest.fixture
def as_carol(client, carol):
    client.force_login(carol)
    return client


def _form(**extra):
    return {"name": "Local Ollama", "base_url": "http://127.0.0.1:11434/v1", "api_key": KEY,
            "models": "llama3.2\nqwen2.5\n", "headers": "", "timeout_seconds": "30", "use": "everyone", **extra}


def test_the_list_shows_connections_but_no_secret(as_admin, connection):
    response = as_admin.get("/models/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Team vLLM" in page and "qwen2.5" in page
    assert KEY not in page and "org-secret-value" not in page


def test_the_list_is_in_the_admin_menu(as_admin):
    assert 'href="/models/"' in as_admin.get("/toolkits/").content.decode()


def test_the_list_query_count_is_pinned(as_admin, admin, django_assert_num_queries):
    for i in range(6):
        services.connection_create(data=services.ConnectionInput(name=f"c{i}", base_url="http://h/v1", models=[]), by=admin)
    # Session, user, connections, their groups, and the menu's counts of packages and of
    # revisions waiting (the admin's two badges).
    with django_assert_num_queries(6):
        assert as_admin.get("/models/").status_code == 200


def test_anonymous_people_are_sent_to_log_in(client, connection):
    for url in ("/models/", "/models/new/", f"/models/{connection.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_non_admins_are_told_nothing_exists(as_carol, connection, model_server):
    assert as_carol.get("/models/").status_code == 404
    assert as_carol.get("/models/new/").status_code == 404
    assert as_carol.post("/models/new/", _form()).status_code == 404
    assert as_carol.get(f"/models/{connection.pk}/").status_code == 404
    assert as_carol.post(f"/models/{connection.pk}/", _form()).status_code == 404
    assert as_carol.post(f"/models/{connection.pk}/test/").status_code == 404
    assert as_carol.post(f"/models/{connection.pk}/delete/").status_code == 404
    assert ModelConnection.objects.get().name == "Team vLLM"
    assert 'href="/models/"' not in as_carol.get("/toolkits/").content.decode()


def test_it_rejects_wrong_methods(as_admin, connection):
    assert as_admin.post("/models/").status_code == 405
    assert as_admin.get(f"/models/{connection.pk}/test/").status_code == 405
    assert as_admin.get(f"/models/{connection.pk}/delete/").status_code == 405


def test_an_unknown_connection_is_404(as_admin):
    assert as_admin.get("/models/999999/").status_code == 404


def test_it_creates_a_connection(as_admin):
    response = as_admin.post("/models/new/", _form(headers="X-Team: blue\nHTTP-Referer: https://toolhub.example"))
    connection = ModelConnection.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/models/{connection.pk}/"
    assert connection.offered_models == ["llama3.2", "qwen2.5"]
    assert connection.api_key() == KEY
    assert connection.extra_headers() == {"X-Team": "blue", "HTTP-Referer": "https://toolhub.example"}
    assert connection.timeout_seconds == 30.0


def test_it_shows_errors_and_stores_nothing(as_admin):
    response = as_admin.post("/models/new/", _form(base_url="ollama:11434", headers="no colon here"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "is not “Name: value”" in page
    assert not ModelConnection.objects.exists()
    response = as_admin.post("/models/new/", _form(base_url="ollama:11434"))
    assert "must start with http:// or https://" in response.content.decode()
    # A submitted key is never rendered back, not even when the form has errors.
    assert KEY not in response.content.decode()
    assert not ModelConnection.objects.exists()


def test_the_edit_page_masks_secrets_and_keeps_them(as_admin, connection):
    page = as_admin.get(f"/models/{connection.pk}/").content.decode()
    assert KEY not in page and "org-secret-value" not in page
    assert "X-Org: ********" in page
    response = as_admin.post(f"/models/{connection.pk}/", _form(name="Team vLLM", api_key="", headers="X-Org: ********\nX-New: 1"))
    assert response.status_code == 302
    connection.refresh_from_db()
    assert connection.name == "Team vLLM"
    assert connection.api_key() == KEY
    assert connection.extra_headers() == {"X-Org": "org-secret-value", "X-New": "1"}


def test_the_edit_page_replaces_or_removes_the_key(as_admin, connection):
    as_admin.post(f"/models/{connection.pk}/", _form(api_key="sk-new-key-987654"))
    connection.refresh_from_db()
    assert connection.api_key() == "sk-new-key-987654"
    as_admin.post(f"/models/{connection.pk}/", _form(api_key="", clear_api_key="on"))
    connection.refresh_from_db()
    assert connection.api_key() == "" and not connection.api_key_set


def test_it_limits_use_to_chosen_groups(as_admin, connection):
    Group.objects.create(name="Research")
    response = as_admin.post(f"/models/{connection.pk}/", _form(use="groups"))
    assert "Choose at least one group." in response.content.decode()
    as_admin.post(f"/models/{connection.pk}/", _form(use="groups", groups=["Research"]))
    connection.refresh_from_db()
    assert connection.use == Use.GROUPS
    assert [g.name for g in connection.groups.all()] == ["Research"]


def test_the_test_button_lists_the_endpoints_models(as_admin, admin, model_server):
    connection = services.connection_create(
        data=services.ConnectionInput(name="Scripted", base_url=model_server.base_url, models=["scripted-1", "gone"], api_key=KEY),
        by=admin,
    )
    response = as_admin.post(f"/models/{connection.pk}/test/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "<code>scripted-1</code>" in page and "<code>scripted-2</code>" in page
    assert "Offered here but not listed by the endpoint:" in page and "<code>gone</code>" in page
    assert model_server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_test_button_shows_why_it_failed(as_admin, admin, model_server):
    model_server.failure = (401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    connection = services.connection_create(
        data=services.ConnectionInput(name="Scripted", base_url=model_server.base_url, models=[], api_key=KEY), by=admin,
    )
    page = as_admin.post(f"/models/{connection.pk}/test/").content.decode()
    assert 'id="test-error"' in page and "HTTP 401" in page
    assert KEY not in page


def test_it_deletes_a_connection(as_admin, connection):
    response = as_admin.post(f"/models/{connection.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/models/"
    assert not ModelConnection.objects.exists()


@pytest.mark.parametrize(("use", "expected"), [
    (Use.EVERYONE, {"admin": True, "carol": True, "dave": True}),
    (Use.GROUPS, {"admin": True, "carol": True, "dave": False}),
    (Use.ADMINS, {"admin": True, "carol": False, "dave": False}),
])
def test_who_may_use_a_connection(admin, carol, django_user_model, use, expected):
    group = Group.objects.create(name="Research")
    carol.groups.add(group)
    dave = django_user_model.objects.create_user("dave", "dave@example.org", "pw-dave-1")
    connection = services.connection_create(
        data=services.ConnectionInput(name="c", base_url="http://h/v1", models=[], use=use, groups=["Research"]), by=admin,
    )
    assert {u.username: connection.usable_by(u) for u in (admin, carol, dave)} == expected
    dave.is_active = False
    assert not connection.usable_by(dave)
