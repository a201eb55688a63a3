"""The serving boundary: what an LLM app's client credential may reach, whoever it acts for;
imports, rollbacks and Valves that cannot go around review; an upload that reveals no hidden
toolkit. Over the API and the pages with Django's test client on the real database (the same
rules over real HTTP, MCP and the OpenAPI tool servers: tests/test_serving_trust_live.py).

The people: admin; alice, an author who owns the toolkits; bob, another author; carol, a plain
user. "Open WebUI" is a credential that acts for the people whose email it forwards."""

from __future__ import annotations

import json
import re

import pytest

from tests import test_revision_review
from tests.conftest import toolkit_source
from tests.test_revision_review import HONEST, HOSTILE, SCHEMA, SECRET, _introspected
from toolhub.accounts import clients
from toolhub.accounts.models import ClientCredential
from toolhub.runs.models import Invocation
from toolhub.runs.services import invocation_create
from toolhub.toolkits import access, bulk, lifecycle, services
from toolhub.toolkits.models import Status, Toolkit, Use
from toolhub.toolkits.valves import load_values, store_values

pytestmark = pytest.mark.django_db

HEADER = "HTTP_X_OPENWEBUI_USER_EMAIL"
SPEC = {"type": "function", "function": {"name": "echo", "description": "Echo.",
                                         "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}


@pytest.fixture
def webui(admin):
    return clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)


@pytest.fixture
def webui_for_admins(admin):
    return clients.client_create(name="Open WebUI (admins too)", acts_for_users=True, may_act_for_admins=True, by=admin)


def _ready(toolkit, tools=(SPEC,)):
    revision = toolkit.current_revision
    revision.set_status(Status.BUILDING)
    revision.save()
    lifecycle.ready(revision=revision, tools=list(tools), valves_schema=None, user_valves_schema=None, plugin_metadata=None)
    return Toolkit.objects.get(pk=toolkit.pk)


def _as(token: str, email: str | None = None) -> dict:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if email:
        headers[HEADER] = email
    return headers


# WHAT A CLIENT CREDENTIAL REACHES
# ------------------------------------------------------------------------------

# The endpoints a calling app needs; every other one is closed to client credentials.
SERVING = {
    ("get", "/api/v1/toolkits"), ("get", "/api/v1/toolkits/{slug}"),
    ("post", "/api/v1/toolkits/{slug}/tools/{tool}/invoke"),
    ("get", "/api/v1/invocations/{invocation_id}"), ("get", "/api/v1/invocations/{invocation_id}/events"),
    ("post", "/api/v1/invocations/{invocation_id}/respond"), ("post", "/api/v1/invocations/{invocation_id}/cancel"),
}


def _operations(client, admin) -> list[tuple[str, str]]:
    client.force_login(admin)
    document = client.get("/api/v1/openapi.json").json()
    client.logout()
    return [(method, path) for path, methods in document["paths"].items() for method in methods]


def test_every_management_endpoint_refuses_a_client_credential_whoever_it_acts_for(client, admin, alice, webui_for_admins):
    """Read from the API's own OpenAPI document, so an endpoint added later is covered too."""
    _credential, token = webui_for_admins
    operations = _operations(client, admin)
    management = [(m, p) for m, p in operations if (m, p) not in SERVING]
    assert len(management) >= 20 and ("get", "/api/v1/clients") in management
    assert SERVING <= set(operations)
    for email in ("admin@example.org", "alice@example.org", None):
        for method, path in management:
            url = re.sub(r"\{[^}]+\}", "x", path)
            body = {} if method in ("get", "delete") else {"data": "{}", "content_type": "application/json"}
            response = getattr(client, method)(url, **body, **_as(token, email))
            assert response.status_code == 403, (method, path, email, response.content[:200])
            assert response.json()["errors"][0]["message"].startswith("A client credential cannot do this")
    assert ClientCredential.objects.count() == 1


def test_the_admins_email_does_not_make_an_app_an_admin(client, admin, alice, webui):
    """The finding: an app forwarding an admin's email read the credentials and minted one."""
    _credential, token = webui
    for path in ("/api/v1/toolkits", "/api/v1/clients", "/api/v1/reviews"):
        response = client.get(path, **_as(token, "admin@example.org"))
        assert response.status_code == 403
        assert "may not act for admins" in response.json()["errors"][0]["message"]
    minted = client.post("/api/v1/clients", data=json.dumps({"name": "Backdoor"}), content_type="application/json",
                         **_as(token, "ADMIN@example.org"))
    assert minted.status_code == 403
    assert not ClientCredential.objects.filter(name="Backdoor").exists()
    # The same credential still calls tools for people who are not admins.
    assert client.get("/api/v1/toolkits", **_as(token, "alice@example.org")).status_code == 200


def test_an_app_allowed_to_act_for_admins_still_only_calls_tools(client, admin, alice, upload, webui_for_admins):
    _credential, token = webui_for_admins
    private = _ready(upload(alice, toolkit_source("Private Echo"), slug="private"))
    access.toolkit_set_access(toolkit=private, use=Use.ADMINS, groups=[], users=[], by=alice)
    listed = client.get("/api/v1/toolkits", **_as(token, "admin@example.org"))
    assert listed.status_code == 200 and [t["slug"] for t in listed.json()["items"]] == ["private"]
    for path in ("/api/v1/clients", "/api/v1/reviews", "/api/v1/packages"):
        assert client.get(path, **_as(token, "admin@example.org")).status_code == 403
    minted = client.post("/api/v1/clients", data=json.dumps({"name": "Another"}), content_type="application/json",
                         **_as(token, "admin@example.org"))
    assert minted.status_code == 403 and ClientCredential.objects.count() == 1


def test_a_persons_own_token_keeps_their_rights(client, admin, bearer):
    assert client.get("/api/v1/clients", **bearer(admin)).status_code == 200


def test_a_credential_follows_only_the_invocations_it_started_for_that_person(client, admin, alice, bob, upload, webui):
    credential, token = webui
    toolkit = _ready(upload(alice, toolkit_source("Echo")))
    own = invocation_create(toolkit=toolkit, tool="echo", arguments={"text": "a"}, user=alice, client=credential)
    from_the_page = invocation_create(toolkit=toolkit, tool="echo", arguments={"text": "b"}, user=alice)
    assert client.get(f"/api/v1/invocations/{own.id}", **_as(token, "alice@example.org")).status_code == 200
    assert client.get(f"/api/v1/invocations/{own.id}/events", **_as(token, "alice@example.org")).status_code == 200
    # Not alice's own run from the dashboard, and not alice's run when acting for bob.
    assert client.get(f"/api/v1/invocations/{from_the_page.id}", **_as(token, "alice@example.org")).status_code == 404
    assert client.get(f"/api/v1/invocations/{own.id}", **_as(token, "bob@example.org")).status_code == 404
    assert client.post(f"/api/v1/invocations/{own.id}/cancel", **_as(token, "bob@example.org")).status_code == 404
    cancelled = client.post(f"/api/v1/invocations/{own.id}/cancel", **_as(token, "alice@example.org"))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "failed"
    assert Invocation.objects.get(pk=from_the_page.pk).status == "queued"


def test_creating_a_credential_says_what_it_can_reach(client, admin, bearer):
    response = client.post("/api/v1/clients", data=json.dumps({"name": "LibreChat", "acts_for_users": True,
                                                              "may_act_for_admins": True}),
                           content_type="application/json", **bearer(admin))
    body = response.json()
    assert response.status_code == 201 and body["may_act_for_admins"] is True
    assert "/mcp and /mcp/{slug}" in body["scope"] and len(body["scope"]) == len(clients.CLIENT_SCOPE)
    # Without acting for users there is nobody to act for: the right is not kept.
    plain = client.post("/api/v1/clients", data=json.dumps({"name": "Batch", "may_act_for_admins": True}),
                        content_type="application/json", **bearer(admin)).json()
    assert plain["may_act_for_admins"] is False


def test_the_credentials_page_shows_the_scope_and_the_admin_right(client, admin):
    client.force_login(admin)
    page = client.get("/clients/").content.decode()
    assert "What a client credential can reach" in page
    for place in clients.CLIENT_SCOPE:
        assert place.replace("&", "&amp;") in page or place in page
    client.post("/clients/", {"name": "Open WebUI", "acts_for_users": "on", "may_act_for_admins": "on",
                              "user_header": "X-OpenWebUI-User-Email"})
    assert ClientCredential.objects.get(name="Open WebUI").may_act_for_admins
    assert "also for admins" in client.get("/clients/").content.decode()


# THE COMBINED OPENAPI SERVER
# ------------------------------------------------------------------------------


def test_an_app_that_names_nobody_lists_only_what_everyone_may_use(client, admin, alice, upload, webui):
    """Open WebUI fetches /openapi/openapi.json once, with the key alone, and offers the list to
    every one of its users: toolkits limited to some people are not in it (they are listed
    when the app names the person, and each has its own URL)."""
    credential, token = webui
    _ready(upload(alice, toolkit_source("Shared Echo"), slug="shared"))
    private = _ready(upload(alice, toolkit_source("Private Echo"), slug="private"))
    # Even a toolkit that lists the app's own service user stays out of the shared list.
    access.toolkit_set_access(toolkit=private, use=Use.GROUPS, groups=[], users=["alice", credential.service_user.username],
                              by=alice)
    shared = client.get("/openapi/openapi.json", **_as(token)).json()
    assert sorted(shared["paths"]) == ["/shared__echo"]
    assert client.get("/openapi/private/openapi.json", **_as(token)).status_code == 404
    assert client.post("/openapi/private__echo", data="{}", content_type="application/json", **_as(token)).status_code == 404
    assert client.post("/openapi/private/echo", data="{}", content_type="application/json", **_as(token)).status_code == 404
    for_alice = client.get("/openapi/openapi.json", **_as(token, "alice@example.org")).json()
    assert sorted(for_alice["paths"]) == ["/private__echo", "/shared__echo"]


# NO PATH AROUND REVIEW
# ------------------------------------------------------------------------------


# alice's toolkit, whose secret Valve an admin has set.
entrusted = test_revision_review.entrusted


def _export(slug: str, source: str) -> bytes:
    return json.dumps([{"id": slug, "name": "Org Search", "content": source}]).encode()


def test_an_admins_import_of_someone_elses_toolkit_waits_for_review(client, admin, entrusted, bearer):
    response = client.post("/api/v1/imports/openwebui", data=_export(entrusted.slug, HOSTILE),
                           content_type="application/json", **bearer(admin))
    assert response.status_code == 200
    (entry,) = response.json()["entries"]
    assert (entry["outcome"], entry["owner"], entry["waits_for_review"]) == ("loaded", "alice", True)
    revision = entrusted.revisions.get(number=2)
    assert revision.imported and not revision.entrusted
    _introspected(revision, SCHEMA)
    assert revision.status == Status.AWAITING_REVIEW
    assert Toolkit.objects.get(pk=entrusted.pk).current_revision.number == 1


def test_a_folder_import_is_reviewed_like_an_upload(admin, entrusted, tmp_path):
    (tmp_path / f"{entrusted.slug}.py").write_text(HOSTILE)
    (verdict,) = list(bulk.import_folder(tmp_path, user=admin))
    assert "a new revision of org_search (owner alice), waits for an admin's review" in verdict.log_line()
    revision = _introspected(entrusted.revisions.get(number=2), SCHEMA)
    assert revision.status == Status.AWAITING_REVIEW


def test_an_admins_own_upload_is_still_trusted(admin, entrusted):
    revision = services.revision_upload(toolkit=entrusted, source=HOSTILE, user=admin).revision
    assert not revision.imported and revision.entrusted


def test_a_rollback_to_an_unreviewed_or_rejected_revision_is_refused(client, admin, alice, upload, bearer):
    toolkit = upload(alice, HONEST)
    _introspected(toolkit.current_revision, SCHEMA)
    unreviewed = _introspected(services.revision_upload(toolkit=toolkit, source=HOSTILE, user=alice).revision, SCHEMA)
    # The admin sets the key while revision 2 is current: it is entrusted; revision 1 is not.
    store_values(toolkit=toolkit, values={"api_key": SECRET}, by=admin)
    refused = client.post(f"/api/v1/toolkits/{toolkit.slug}/rollback", data=json.dumps({"revision": 1}),
                          content_type="application/json", **bearer(alice))
    assert refused.status_code == 409 and "never reviewed by an admin" in refused.json()["errors"][0]["message"]
    # A third revision rejected in review cannot be made current either, on the page or the API.
    third = _introspected(services.revision_upload(toolkit=toolkit, source=HOSTILE + "\n# v3\n", user=alice).revision, SCHEMA)
    lifecycle.review_decide(revision_id=third.pk, user=admin, approve=False, reason="leaks")
    refused = client.post(f"/api/v1/toolkits/{toolkit.slug}/rollback", data=json.dumps({"revision": 3}),
                          content_type="application/json", **bearer(alice))
    assert refused.status_code == 409 and "was rejected" in refused.json()["errors"][0]["message"]
    client.force_login(alice)
    page = client.post(f"/toolkits/{toolkit.slug}/rollback/", {"revision": "3"}, follow=True)
    assert "was rejected; it cannot become current" in page.content.decode()
    # The Revisions tab offers no rollback to it.
    assert 'form="rollback-3"' not in page.content.decode() and 'form="rollback-1"' in page.content.decode()
    assert Toolkit.objects.get(pk=toolkit.pk).current_revision_id == unreviewed.pk


def test_after_a_review_rejection_the_owner_reads_what_happens(client, admin, alice, entrusted):
    pending = _introspected(services.revision_upload(toolkit=entrusted, source=HOSTILE, user=alice).revision, SCHEMA)
    lifecycle.review_decide(revision_id=pending.pk, user=admin, approve=False, reason="it sends the key out")
    client.force_login(alice)
    overview = client.get(f"/toolkits/{entrusted.slug}/").content.decode()
    assert "stays in use until it is ready" not in overview
    assert "Revision 2 was rejected and will not serve; revision 1 stays current." in overview
    assert overview.count("it sends the key out") == 1
    environment = client.get(f"/toolkits/{entrusted.slug}/environment/").content.decode()
    assert "/environment/retry/" not in environment
    assert "Rejected in review: this revision will not serve." in environment
    assert lifecycle.retry(revision_id=pending.pk) is None


def test_valves_are_saved_only_for_the_revision_the_admin_was_shown(client, admin, alice, entrusted, bearer):
    client.force_login(admin)
    form = client.get(f"/toolkits/{entrusted.slug}/valves/").content.decode()
    assert 'name="revision" value="1"' in form
    # Meanwhile revision 2 becomes current (built, or rolled back to).
    second = _introspected(services.revision_upload(toolkit=entrusted, source=HONEST + "\n# v2\n", user=admin).revision, SCHEMA)
    assert Toolkit.objects.get(pk=entrusted.pk).current_revision_id == second.pk
    response = client.post(f"/toolkits/{entrusted.slug}/valves/", {"revision": "1", "api_key": "new-key-99"})
    assert response.status_code == 200
    assert "since this form showed revision 1; nothing was saved" in response.content.decode()
    assert load_values(toolkit=entrusted) == {"api_key": SECRET}
    # The form made for the current revision saves.
    client.post(f"/toolkits/{entrusted.slug}/valves/", {"revision": "2", "api_key": "new-key-99"})
    assert load_values(toolkit=entrusted) == {"api_key": "new-key-99"}
    stale = client.put(f"/api/v1/toolkits/{entrusted.slug}/valves", data=json.dumps({"values": {"api_key": "x"}, "revision": 1}),
                       content_type="application/json", **bearer(admin))
    assert stale.status_code == 409 and stale.json()["errors"][0]["field"] == "revision"


# NO ORACLE
# ------------------------------------------------------------------------------


def test_an_upload_reveals_nothing_of_a_toolkit_the_uploader_may_not_see(client, alice, bob, upload, bearer):
    hidden = upload(alice, toolkit_source("Payroll"), slug="payroll")
    access.toolkit_set_access(toolkit=hidden, use=Use.GROUPS, groups=[], users=[], by=alice)
    upload(alice, toolkit_source("Payroll 2"), slug="payroll_2")
    response = client.post("/api/v1/toolkits", data=json.dumps({"source": toolkit_source("Mine"), "slug": "payroll"}),
                           content_type="application/json", **bearer(bob))
    assert response.status_code == 409
    message = response.json()["errors"][0]["message"]
    assert message.startswith("The slug 'payroll' is not available") and "exists" not in message
    suggestion = re.search(r"such as '(payroll_[0-9a-f]{6})'", message)
    assert suggestion, message  # not payroll_3, which would count the hidden toolkit's siblings
    # Someone who may see it is told plainly, with the next free numbered slug.
    visible = client.post("/api/v1/toolkits", data=json.dumps({"source": toolkit_source("Mine"), "slug": "payroll_2"}),
                          content_type="application/json", **bearer(bob))
    assert "exists already" in visible.json()["errors"][0]["message"] and "'payroll_2_2'" in visible.json()["errors"][0]["message"]


# CATALOGUES THAT SCALE
# ------------------------------------------------------------------------------


def test_a_prefixed_tool_is_found_by_its_toolkit_however_many_there_are(alice, upload, settings):
    from toolhub.serving import catalog

    settings.TOOLHUB_MCP_PAGE_TOOLKITS = 1
    for slug in ("a", "b_c", "b", "zz"):
        _ready(upload(alice, toolkit_source(f"Echo {slug}"), slug=slug))
    assert catalog.find(alice, "zz__echo").toolkit.slug == "zz"
    assert catalog.find(alice, "b_c__echo").toolkit.slug == "b_c"
    assert catalog.find(alice, "b__echo").toolkit.slug == "b"
    assert catalog.find(alice, "nope__echo") is None
    long_slug = "s" * 60
    _ready(upload(alice, toolkit_source("Long"), slug=long_slug))
    shortened = catalog.prefixed_name(long_slug, "echo")
    assert len(shortened) == 64 and catalog.find(alice, shortened).toolkit.slug == long_slug
    first, cursor = catalog.catalog_page(alice)
    assert [t.name for t in first] == ["a__echo"] and cursor
    with pytest.raises(catalog.BadCursor):
        catalog.catalog_page(alice, cursor + "x")


def test_a_call_reads_its_toolkit_in_one_query_and_not_again_once_found(alice, bob, upload, django_assert_num_queries):
    from toolhub.serving import catalog

    _ready(upload(alice, toolkit_source("Echo"), slug="echo_kit"))
    with django_assert_num_queries(1):
        toolkit = catalog.toolkit_to_serve(alice, "echo_kit")
    with django_assert_num_queries(0):
        served = catalog.find(alice, "echo", "echo_kit", toolkit=toolkit)
    assert served is not None and (served.toolkit.slug, served.tool) == ("echo_kit", "echo")
    # Another person's, shared with nobody: not found, for the plain call and the prefixed one.
    access.toolkit_set_access(toolkit=toolkit, use=Use.ADMINS, groups=[], users=[], by=alice)
    assert catalog.toolkit_to_serve(bob, "echo_kit") is None
    assert catalog.find(bob, "echo", "echo_kit") is None and catalog.find(bob, "echo_kit__echo") is None
    # Only a toolkit everyone may use is served to an app that names nobody.
    assert catalog.toolkit_to_serve(alice, "echo_kit", shared=True) is None
    access.toolkit_set_access(toolkit=toolkit, use=Use.EVERYONE, groups=[], users=[], by=alice)
    assert catalog.toolkit_to_serve(bob, "echo_kit", shared=True).slug == "echo_kit"


def test_the_combined_document_past_its_limit_says_so_and_names_the_other_urls(client, alice, upload, bearer, settings):
    settings.TOOLHUB_OPENAPI_MAX_TOOLKITS = 2
    for slug in ("a", "b", "c"):
        _ready(upload(alice, toolkit_source(f"Echo {slug}"), slug=slug))
    response = client.get("/openapi/openapi.json", **bearer(alice))
    assert response.status_code == 413
    message = response.json()["errors"][0]["message"]
    assert "More than 2 toolkits" in message and "/openapi/{slug}/openapi.json" in message and "/mcp" in message
    assert client.get("/openapi/c/openapi.json", **bearer(alice)).status_code == 200
