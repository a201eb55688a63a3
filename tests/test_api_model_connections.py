"""`GET/POST /api/v1/model-connections` and the test endpoint, against a real OpenAI-compatible
server (tests/model_server.py) through the real `openai` client.

People (see conftest): admin is staff; carol is a plain user, who is told nothing exists here.
"""

from __future__ import annotations

import pytest

from tests.test_api_toolkits import _api, _is_error
from toolhub.agents.models import ModelConnection
from toolhub.toolkits.valves import vault

pytestmark = pytest.mark.django_db

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def as_admin(admin):
    return _api(admin)


@pytest.fixture
def as_carol(carol):
    return _api(carol)


def _body(**extra):
    return {"name": "Local Ollama", "base_url": "http://127.0.0.1:11434/v1/", "api_key": KEY,
            "models": ["llama3.2", "qwen2.5"], **extra}


def test_it_creates_a_connection_and_never_returns_the_key(as_admin):
    response = as_admin.post("/model-connections", _body(headers={"X-Team": "tools-secret-team"}))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "Local Ollama"
    assert body["base_url"] == "http://127.0.0.1:11434/v1"
    assert body["models"] == ["llama3.2", "qwen2.5"]
    assert body["use"] == "everyone" and body["groups"] == []
    assert body["api_key_set"] is True
    assert body["header_names"] == ["X-Team"]
    assert KEY not in response.content.decode() and "tools-secret-team" not in response.content.decode()
    listed = as_admin.get("/model-connections")
    assert listed.status_code == 200
    assert [c["name"] for c in listed.json()["items"]] == ["Local Ollama"]
    assert KEY not in listed.content.decode() and "tools-secret-team" not in listed.content.decode()


def test_it_stores_the_key_and_headers_encrypted(as_admin):
    as_admin.post("/model-connections", _body(headers={"X-Team": "tools-secret-team"}))
    row = ModelConnection.objects.values().get()
    stored = " ".join(str(v) for v in row.values())
    assert KEY not in stored and "tools-secret-team" not in stored
    assert vault().decrypt_json(row["api_key_ciphertext"]) == KEY
    assert ModelConnection.objects.get().extra_headers() == {"X-Team": "tools-secret-team"}


def test_a_connection_without_a_key_has_none(as_admin):
    body = as_admin.post("/model-connections", _body(api_key="")).json()
    assert body["api_key_set"] is False
    assert ModelConnection.objects.get().api_key() == ""


def test_it_limits_use_to_groups_that_exist(as_admin):
    from django.contrib.auth.models import Group

    Group.objects.create(name="Research")
    body = as_admin.post("/model-connections", _body(use="groups", groups=["Research"])).json()
    assert body["use"] == "groups" and body["groups"] == ["Research"]
    errors = _is_error(as_admin.post("/model-connections", _body(name="Other", use="groups", groups=["Nobody"])), 400)
    assert errors[0]["field"] == "groups" and "Nobody" in errors[0]["message"]


@pytest.mark.parametrize(("extra", "field"), [
    ({"base_url": "ftp://example.org/v1"}, "base_url"),
    ({"base_url": "http://user:pw@example.org/v1"}, "base_url"),
    ({"base_url": "http://example.org/v1?x=1"}, "base_url"),
    ({"name": "   "}, "name"),
    ({"models": ["has space"]}, "models"),
    ({"models": [f"m{i}" for i in range(101)]}, "models"),
    ({"timeout_seconds": 0}, "timeout_seconds"),
    ({"timeout_seconds": 601}, "timeout_seconds"),
    ({"use": "anyone"}, "use"),
    ({"headers": {"Authorization": "Bearer x"}}, "headers"),
    ({"headers": {"Bad Name": "x"}}, "headers"),
    ({"headers": {"X-A": "a\r\nX-B: b"}}, "headers"),
    ({"headers": {"X-Keep": "********"}}, "headers"),
    ({"api_key": "has space"}, "api_key"),
])
def test_it_refuses_bad_input_and_stores_nothing(as_admin, extra, field):
    errors = _is_error(as_admin.post("/model-connections", _body(**extra)), 400)
    assert field in {e["field"] for e in errors}
    assert not ModelConnection.objects.exists()


def test_it_refuses_a_taken_name(as_admin):
    as_admin.post("/model-connections", _body())
    errors = _is_error(as_admin.post("/model-connections", _body()), 400)
    assert errors[0]["field"] == "name"
    assert ModelConnection.objects.count() == 1


def test_it_is_hidden_from_non_admins(as_carol):
    _is_error(as_carol.get("/model-connections"), 404)
    _is_error(as_carol.post("/model-connections", _body()), 404)
    assert not ModelConnection.objects.exists()


def test_it_requires_authentication():
    from tests.test_api_toolkits import Api

    _is_error(Api(None).get("/model-connections"), 401)


def test_it_rejects_a_wrong_method(as_admin):
    _is_error(as_admin.delete("/model-connections"), 405)


def test_its_list_query_count_does_not_grow(as_admin, django_assert_num_queries):
    for i in range(5):
        as_admin.post("/model-connections", _body(name=f"c{i}"))
    # Token lookup, last-used write skipped (just written), connections, their groups.
    with django_assert_num_queries(3):
        assert len(as_admin.get("/model-connections").json()["items"]) == 5


def test_the_test_endpoint_lists_the_models_with_the_key_and_headers(as_admin, model_server):
    created = as_admin.post("/model-connections", _body(base_url=model_server.base_url, headers={"X-Team": "blue"})).json()
    response = as_admin.post(f"/model-connections/{created['id']}/test")
    assert response.status_code == 200, response.content
    assert response.json() == {"models": ["scripted-1", "scripted-2"]}
    (request,) = model_server.requests
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-team"] == "blue"


def test_the_test_endpoint_reports_an_endpoint_error_without_the_key(as_admin, model_server):
    # OpenAI's own 401 echoes the key it was given; the message ToolHub shows must not.
    model_server.failure = (401, {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}})
    created = as_admin.post("/model-connections", _body(base_url=model_server.base_url)).json()
    errors = _is_error(as_admin.post(f"/model-connections/{created['id']}/test"), 503)
    assert "HTTP 401" in errors[0]["message"]
    assert KEY not in errors[0]["message"]


def test_the_test_endpoint_reports_an_endpoint_that_is_down(as_admin, model_server):
    created = as_admin.post("/model-connections", _body(base_url="http://127.0.0.1:9/v1")).json()
    errors = _is_error(as_admin.post(f"/model-connections/{created['id']}/test"), 503)
    assert "Could not connect" in errors[0]["message"]


def test_the_test_endpoint_is_hidden_from_non_admins(as_admin, as_carol, model_server):
    created = as_admin.post("/model-connections", _body(base_url=model_server.base_url)).json()
    _is_error(as_carol.post(f"/model-connections/{created['id']}/test"), 404)
    _is_error(as_admin.post("/model-connections/999999/test"), 404)
    assert model_server.requests == []


def test_key_rotation_keeps_keys_and_headers_readable_after_the_old_key_is_dropped(admin, settings):
    import os

    from cryptography.fernet import Fernet
    from django.core.management import call_command

    from toolhub.agents import services
    from toolhub.toolkits.valves import _vault_for

    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLHUB_ENCRYPTION_KEYS = key_a
    services.connection_create(data=services.ConnectionInput(
        name="c", base_url="http://h/v1", models=[], api_key=KEY, headers={"X-Team": "blue-secret"}), by=admin)
    settings.TOOLHUB_ENCRYPTION_KEYS = f"{key_b},{key_a}"
    call_command("rotate_connection_keys", stdout=open(os.devnull, "w"))
    call_command("rotate_connection_keys", stdout=open(os.devnull, "w"))
    settings.TOOLHUB_ENCRYPTION_KEYS = key_b
    _vault_for.cache_clear()
    connection = ModelConnection.objects.get()
    assert connection.api_key() == KEY
    assert connection.extra_headers() == {"X-Team": "blue-secret"}
