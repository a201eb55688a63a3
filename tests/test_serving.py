"""The tool servers' parts that need no worker: names on the all-toolkits surfaces, the
OpenAPI documents, and the refusals of the OpenAPI endpoints (anonymous, wrong method, a
toolkit not ready or not allowed, CORS). Calls that run are in tests/test_serving_live.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import toolkit_source
from toolhub.serving import catalog, openapi
from toolhub.toolkits import access
from toolhub.toolkits.models import Use

pytestmark = pytest.mark.django_db

NESTED = {
    "type": "object",
    "properties": {"where": {"$ref": "#/$defs/Place"}},
    "required": ["where"],
    "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}, "near": {"$ref": "#/$defs/Place"}}}},
}


def _ready(toolkit, tools=None):
    revision = toolkit.current_revision
    revision.tools = tools or [{"type": "function", "function": {"name": "echo", "description": "Return the text.\nMore.",
                                                                 "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]
    revision.set_status("ready")
    revision.save()
    return toolkit


def test_prefixed_names_are_kept_short_and_stable():
    assert catalog.prefixed_name("served", "greet") == "served__greet"
    long = catalog.prefixed_name("a" * 40, "b" * 40)
    assert len(long) == 64 and long == catalog.prefixed_name("a" * 40, "b" * 40)
    assert long != catalog.prefixed_name("a" * 40, "b" * 39 + "c")
    assert long.startswith("a" * 40 + "__")


def test_local_defs_move_to_components():
    served = catalog.ServedTool(name="find", toolkit=None, revision=None, tool="find", description="d", parameters=NESTED)
    doc = openapi.document(title="t", description="", version="1", tools=[served])
    body = doc["paths"]["/find"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["where"] == {"$ref": "#/components/schemas/find__Place"}
    assert "$defs" not in body
    assert doc["components"]["schemas"]["find__Place"]["properties"]["near"] == {"$ref": "#/components/schemas/find__Place"}


def test_the_document_lists_the_ready_tools_of_a_usable_toolkit(client, alice, bearer, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    doc = client.get("/openapi/echo/openapi.json", **bearer(alice)).json()
    operation = doc["paths"]["/echo"]["post"]
    assert (operation["operationId"], operation["summary"], operation["description"]) == ("echo", "Return the text.", "Return the text.\nMore.")
    assert doc["info"]["title"] == "Echo" and doc["security"] == [{"bearer": []}]
    everything = client.get("/openapi/openapi.json", **bearer(alice)).json()
    assert list(everything["paths"]) == ["/echo__echo"]


def test_it_refuses_anonymous_callers_and_bad_tokens(client, alice, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    for response in (client.get("/openapi/echo/openapi.json"), client.post("/openapi/echo/echo", "{}", content_type="application/json")):
        assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
        assert response.json()["errors"][0]["message"].startswith("Authentication required")
    # A token that was sent and refused is answered differently from no token at all.
    for response in (client.get("/openapi/openapi.json", HTTP_AUTHORIZATION="Bearer th_nope"),
                     client.post("/openapi/echo/echo", "{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer " + "x" * 300)):
        assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
        assert response.json()["errors"][0]["message"].startswith("The bearer token is not valid")


def test_every_operation_documents_its_refusals(client, alice, bearer, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    doc = client.get("/openapi/echo/openapi.json", **bearer(alice)).json()
    responses = doc["paths"]["/echo"]["post"]["responses"]
    # 202: accepted, but the wait for the result broke (the database went away meanwhile).
    assert set(responses) == {"200", "202", "400", "401", "403", "404", "429", "500"}
    assert responses["401"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Errors"}


def test_it_rejects_wrong_methods(client, alice, bearer, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    assert client.post("/openapi/echo/openapi.json", **bearer(alice)).status_code == 405
    response = client.get("/openapi/echo/echo", **bearer(alice))
    assert response.status_code == 405 and response["Allow"] == "POST"


def test_a_toolkit_the_caller_may_not_use_is_absent(client, alice, carol, bearer, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    toolkit = _ready(upload(alice, toolkit_source("Hidden"), slug="hidden"))
    access.toolkit_set_access(toolkit=toolkit, use=Use.ADMINS, groups=[], users=[], by=alice)
    headers = bearer(carol)
    assert client.get("/openapi/hidden/openapi.json", **headers).status_code == 404
    assert client.post("/openapi/hidden/echo", "{}", content_type="application/json", **headers).status_code == 404
    assert client.post("/openapi/hidden__echo", "{}", content_type="application/json", **headers).status_code == 404
    assert list(client.get("/openapi/openapi.json", **headers).json()["paths"]) == ["/echo__echo"]
    assert "/hidden__echo" in client.get("/openapi/openapi.json", **bearer(alice)).json()["paths"]


def test_a_toolkit_not_ready_answers_409_and_an_unknown_tool_404(client, alice, bearer, upload):
    upload(alice, toolkit_source("Echo"), slug="echo")
    headers = bearer(alice)
    response = client.post("/openapi/echo/echo", json.dumps({"text": "x"}), content_type="application/json", **headers)
    assert response.status_code == 409 and response.json()["errors"][0]["message"].startswith("The toolkit is not ready")
    assert client.post("/openapi/echo/nope", "{}", content_type="application/json", **headers).status_code == 404


def test_bad_bodies_are_refused_before_anything_runs(client, alice, bearer, upload, settings):
    from toolhub.runs.models import Invocation

    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    headers = bearer(alice)
    assert client.post("/openapi/echo/echo", "{nope", content_type="application/json", **headers).status_code == 400
    bad = client.post("/openapi/echo/echo", json.dumps({"text": 5}), content_type="application/json", **headers)
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "text"
    big = client.post("/openapi/echo/echo", json.dumps({"text": "x" * (openapi.MAX_BODY + 1)}), content_type="application/json", **headers)
    assert big.status_code == 413
    assert not Invocation.objects.exists()


def test_cors_is_off_unless_the_origin_is_listed(client, alice, bearer, upload, settings):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    headers = bearer(alice)
    response = client.get("/openapi/echo/openapi.json", HTTP_ORIGIN="https://chat.example.org", **headers)
    assert "Access-Control-Allow-Origin" not in response
    settings.TOOLHUB_CORS_ORIGINS = ["https://chat.example.org"]
    response = client.get("/openapi/echo/openapi.json", HTTP_ORIGIN="https://chat.example.org", **headers)
    assert response["Access-Control-Allow-Origin"] == "https://chat.example.org"
    preflight = client.options("/openapi/echo/echo", HTTP_ORIGIN="https://chat.example.org")
    assert preflight.status_code == 204 and "Authorization" in preflight["Access-Control-Allow-Headers"]
    other = client.options("/openapi/echo/echo", HTTP_ORIGIN="https://evil.example")
    assert "Access-Control-Allow-Origin" not in other


# RATE LIMITS
# ------------------------------------------------------------------------------


def _made(toolkit, user, *, client=None, surface="openapi", age_seconds=0):
    from datetime import timedelta

    from django.utils import timezone

    from toolhub.runs.models import Invocation

    return Invocation.objects.create(toolkit=toolkit, revision=toolkit.current_revision, tool="echo", user=user,
                                     client=client, surface=surface, status="succeeded",
                                     created_at=timezone.now() - timedelta(seconds=age_seconds))


def test_a_client_over_its_limit_gets_429_with_retry_after(client, admin, alice, upload):
    from toolhub.accounts import clients
    from toolhub.runs.models import Invocation

    toolkit = _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    credential, token = clients.client_create(name="Busy app", calls_per_minute=2, by=admin)
    _made(toolkit, credential.service_user, client=credential, age_seconds=50)
    _made(toolkit, credential.service_user, client=credential, age_seconds=10)
    before = Invocation.objects.count()
    response = client.post("/openapi/echo/echo", json.dumps({"text": "x"}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 429
    # The older of the two calls leaves the window in about ten seconds.
    assert 8 <= int(response["Retry-After"]) <= 11
    assert "at most 2 calls a minute for this client" in response.json()["errors"][0]["message"]
    assert Invocation.objects.count() == before


def test_each_user_has_a_limit_of_their_own(client, alice, bob, bearer, upload, settings):
    settings.TOOLHUB_USER_CALLS_PER_MINUTE = 1
    settings.TOOLHUB_SERVE_WAIT_SECONDS = 0.2
    toolkit = _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    _made(toolkit, alice, surface="mcp", age_seconds=5)
    body = json.dumps({"text": "x"})
    limited = client.post("/openapi/echo/echo", body, content_type="application/json", **bearer(alice))
    assert limited.status_code == 429 and "for each user" in limited.json()["errors"][0]["message"]
    # bob has made no call; with no worker here his call is accepted and still waiting.
    assert client.post("/openapi/echo/echo", body, content_type="application/json", **bearer(bob)).status_code == 504
    # Calls older than a minute and calls from the dashboard or the API do not count.
    settings.TOOLHUB_USER_CALLS_PER_MINUTE = 2
    _made(toolkit, alice, surface="openapi", age_seconds=61)
    _made(toolkit, alice, surface="api")
    _made(toolkit, alice, surface="page")
    assert client.post("/openapi/echo/echo", body, content_type="application/json", **bearer(alice)).status_code == 504


def test_client_limits_are_set_and_shown_by_the_api(client, admin, bearer):
    headers = bearer(admin)
    created = client.post("/api/v1/clients", json.dumps({"name": "Limited", "calls_per_minute": 100, "user_calls_per_minute": 10}),
                          content_type="application/json", **headers).json()
    assert (created["calls_per_minute"], created["user_calls_per_minute"]) == (100, 10)
    bad = client.post("/api/v1/clients", json.dumps({"name": "Bad", "calls_per_minute": -1}), content_type="application/json", **headers)
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "calls_per_minute"


# THE CONNECT TAB
# ------------------------------------------------------------------------------


def test_the_connect_tab_shows_the_urls_with_copy_buttons(client, alice, carol, upload):
    _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    client.force_login(carol)
    response = client.get("/toolkits/echo/connect/")
    assert response.status_code == 200
    body = response.content.decode()
    for url in ("http://testserver/mcp/echo", "http://testserver/mcp", "http://testserver/openapi/echo"):
        assert f">{url}</code>" in body
    assert 'data-copy="c-mcp"' in body and "/static/js/connect.js" in body
    # The credential's default header, the one Open WebUI sends (not LibreChat's docs' X-User-Email).
    assert 'X-OpenWebUI-User-Email: "{{LIBRECHAT_USER_EMAIL}}"' in body
    assert "<code>echo</code>" in body


def test_the_connect_tab_follows_access(client, alice, carol, upload):
    toolkit = _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    access.toolkit_set_access(toolkit=toolkit, use=Use.ADMINS, groups=[], users=[], by=alice)
    client.force_login(carol)
    assert client.get("/toolkits/echo/connect/").status_code == 404
    client.logout()
    assert client.get("/toolkits/echo/connect/").status_code == 302
    client.force_login(alice)
    assert client.post("/toolkits/echo/connect/").status_code == 405


# THE AUDIT VIEW
# ------------------------------------------------------------------------------


def test_the_audit_counts_calls_by_client_user_toolkit_and_outcome(client, admin, alice, bob, upload, django_assert_max_num_queries):
    from toolhub.accounts import clients

    toolkit = _ready(upload(alice, toolkit_source("Echo"), slug="echo"))
    webui, _token = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    for _ in range(3):
        _made(toolkit, alice, client=webui)
    _made(toolkit, bob, client=webui, surface="mcp").__class__.objects.filter(user=bob).update(status="failed")
    _made(toolkit, alice, surface="page")  # not a tool-server call
    _made(toolkit, alice, client=webui, age_seconds=10 * 86400)  # outside the default week
    client.force_login(admin)
    with django_assert_max_num_queries(8):
        body = client.get("/clients/audit/").content.decode()
    rows = body.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == 2
    assert "alice" in rows[0] and "Open WebUI" in rows[0] and "Succeeded" in rows[0] and "<td>3</td>" in rows[0]
    assert "bob" in rows[1] and "Failed" in rows[1] and "MCP" in rows[1]
    month = client.get("/clients/audit/?days=30").content.decode()
    assert "<td>4</td>" in month
    assert "No calls in this period." in client.get("/clients/audit/?client=none").content.decode()


def test_the_audit_is_for_admins_only(client, carol):
    assert client.get("/clients/audit/").status_code == 302
    client.force_login(carol)
    assert client.get("/clients/audit/").status_code == 404


def test_the_audit_rejects_post(client, admin):
    client.force_login(admin)
    assert client.post("/clients/audit/").status_code == 405
