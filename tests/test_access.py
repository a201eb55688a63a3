"""Who may use a toolkit (toolhub.toolkits.access), on the pages and the API.

The people: alice owns the toolkit; bob is in the "Research" group; carol is a plain user
outside it; admin is staff. MCP and the OpenAPI tool servers are tested in their own files
against the same selector."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Group

from tests.conftest import toolkit_source
from toolhub.toolkits import access
from toolhub.toolkits.models import HistoryEntry, Use

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(bob):
    group = Group.objects.create(name="Research")
    bob.groups.add(group)
    return group


@pytest.fixture
def secret(upload, alice):
    return upload(alice, toolkit_source("Secret Lab"), slug="secret_lab")


@pytest.fixture
def public(upload, alice):
    return upload(alice, toolkit_source("Public Echo"), slug="public_echo")


def _slugs(user) -> set[str]:
    return set(access.toolkits_usable_by(user).values_list("slug", flat=True))


def test_everyone_may_use_a_new_toolkit(secret, bob, carol):
    assert secret.use == Use.EVERYONE
    assert _slugs(bob) == _slugs(carol) == {"secret_lab"}


def test_groups_admit_members_and_listed_people_only(secret, public, alice, bob, carol, admin, research, django_user_model):
    dave = django_user_model.objects.create_user("dave", "dave@example.org", "pw-dave-1")
    access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Research"], users=["dave"], by=alice)
    assert _slugs(bob) == {"secret_lab", "public_echo"}
    assert _slugs(dave) == {"secret_lab", "public_echo"}
    assert _slugs(carol) == {"public_echo"}
    assert _slugs(alice) == {"secret_lab", "public_echo"}
    assert _slugs(admin) == {"secret_lab", "public_echo"}
    assert access.toolkit_usable_by(carol, "secret_lab") is None
    assert access.toolkit_usable_by(bob, "secret_lab") == secret


def test_admins_only_leaves_the_owner_and_admins(secret, alice, bob, carol, admin, research):
    access.toolkit_set_access(toolkit=secret, use=Use.ADMINS, groups=["Research"], users=[], by=admin)
    assert _slugs(bob) == _slugs(carol) == set()
    assert _slugs(alice) == _slugs(admin) == {"secret_lab"}


def test_nobody_anonymous_or_inactive_may_use_anything(secret, carol):
    from django.contrib.auth.models import AnonymousUser

    assert _slugs(AnonymousUser()) == set()
    carol.is_active = False
    carol.save()
    assert _slugs(carol) == set()


def test_a_person_in_two_listed_groups_sees_the_toolkit_once(secret, alice, bob, research):
    other = Group.objects.create(name="Other")
    bob.groups.add(other)
    access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Research", "Other"], users=["bob"], by=alice)
    assert list(access.toolkits_usable_by(bob).values_list("slug", flat=True)) == ["secret_lab"]


@pytest.mark.parametrize("use", Use.values)
def test_a_tool_call_finds_the_toolkit_exactly_when_the_lists_show_it(
    secret, use, alice, bob, carol, admin, research, django_user_model, django_assert_max_num_queries,
):
    # toolkit_to_call decides the plain cases on the row itself; it must agree with the rule.
    dave = django_user_model.objects.create_user("dave", "dave@example.org", "pw-dave-1")
    gone = django_user_model.objects.create_user("gone", "gone@example.org", "pw-gone-1", is_active=False)
    access.toolkit_set_access(toolkit=secret, use=use, groups=["Research"], users=["dave"], by=alice)
    for user in (alice, bob, carol, dave, admin, gone):
        with django_assert_max_num_queries(2):
            found = access.toolkit_to_call(user, "secret_lab")
        assert (found == secret) == ("secret_lab" in _slugs(user)), (use, user.username)
        assert access.toolkit_to_call(user, "no_such_kit") is None
    from django.contrib.auth.models import AnonymousUser

    assert access.toolkit_to_call(AnonymousUser(), "secret_lab") is None


def test_a_tool_call_reads_one_query_and_no_source_for_the_plain_cases(secret, alice, carol, admin, django_assert_num_queries):
    for user in (alice, carol, admin):
        with django_assert_num_queries(1) as captured:
            found = access.toolkit_to_call(user, "secret_lab")
            assert (found.pk, found.slug, found.owner_id, found.use) == (secret.pk, "secret_lab", alice.pk, secret.use)
            revision = secret.current_revision
            assert (found.current_revision.pk, found.current_revision.number, found.current_revision.status) == (
                revision.pk, revision.number, revision.status,
            )
            assert found.current_revision.tools == revision.tools
        assert '"source"' not in captured.captured_queries[0]["sql"]


def test_a_tool_call_finds_a_toolkit_without_a_current_revision_too(secret, alice):
    # The revision is LEFT JOINed: a toolkit without one is found, and the call answers 409.
    type(secret).objects.filter(pk=secret.pk).update(current_revision=None)
    found = access.toolkit_to_call(alice, "secret_lab")
    assert found == secret and found.current_revision is None


def test_unknown_names_are_refused_and_nothing_changes(secret, alice):
    with pytest.raises(access.InvalidAccess, match="No such group: Nope"):
        access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Nope"], users=[], by=alice)
    with pytest.raises(access.InvalidAccess, match="No such user: ghost"):
        access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=[], users=["ghost"], by=alice)
    with pytest.raises(access.InvalidAccess):
        access.toolkit_set_access(toolkit=secret, use="friends", groups=[], users=[], by=alice)
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE
    assert not HistoryEntry.objects.exists()


def test_a_change_is_recorded_in_the_history_once(secret, alice, research):
    access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Research"], users=[], by=alice)
    access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Research"], users=[], by=alice)
    entry = HistoryEntry.objects.get()
    assert entry.by == alice and entry.kind == "access"
    assert entry.data["before"]["use"] == "everyone"
    assert entry.data["after"] == {"use": "groups", "groups": ["Research"], "users": []}


# PAGES
# ------------------------------------------------------------------------------


def _restrict(secret, alice):
    access.toolkit_set_access(toolkit=secret, use=Use.GROUPS, groups=["Research"], users=[], by=alice)


@pytest.mark.parametrize("path", ["/toolkits/secret_lab/", "/toolkits/secret_lab/source/", "/toolkits/secret_lab/tools/",
                                  "/toolkits/secret_lab/settings/", "/toolkits/secret_lab/revisions/"])
def test_pages_of_a_toolkit_answer_404_to_someone_not_allowed(client, secret, alice, carol, research, path):
    _restrict(secret, alice)
    client.force_login(carol)
    assert client.get(path).status_code == 404


def test_pages_open_for_a_group_member(client, secret, alice, bob, research):
    _restrict(secret, alice)
    client.force_login(bob)
    assert client.get("/toolkits/secret_lab/").status_code == 200


def test_the_list_page_leaves_out_what_the_user_may_not_use(client, secret, public, alice, carol, research, django_assert_max_num_queries):
    _restrict(secret, alice)
    client.force_login(carol)
    with django_assert_max_num_queries(8):
        body = client.get("/toolkits/").content.decode()
    assert "Public Echo" in body and "Secret Lab" not in body


def test_anonymous_is_sent_to_log_in(client, secret):
    response = client.get("/toolkits/secret_lab/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_owner_sets_access_on_the_overview(client, secret, alice, carol, research):
    client.force_login(alice)
    page = client.get("/toolkits/secret_lab/").content.decode()
    assert 'action="/toolkits/secret_lab/access/"' in page and 'value="Research"' in page
    response = client.post("/toolkits/secret_lab/access/", {"use": "groups", "groups": ["Research"], "users": "carol\n"})
    assert response.status_code == 302
    secret.refresh_from_db()
    assert access.access_out(secret) == {"use": "groups", "groups": ["Research"], "users": ["carol"]}
    page = client.get("/toolkits/secret_lab/").content.decode()
    assert "Access saved." in page
    assert "alice set use to “groups”." in page


def test_the_form_reports_an_unknown_user_and_changes_nothing(client, secret, alice):
    client.force_login(alice)
    client.post("/toolkits/secret_lab/access/", {"use": "groups", "users": "ghost"})
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE
    assert "No such user: ghost." in client.get("/toolkits/secret_lab/").content.decode()


def test_someone_else_may_not_set_access(client, secret, carol):
    client.force_login(carol)
    assert 'action="/toolkits/secret_lab/access/"' not in client.get("/toolkits/secret_lab/").content.decode()
    assert client.post("/toolkits/secret_lab/access/", {"use": "admins"}).status_code == 403
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE


def test_an_admin_may_set_access(client, secret, admin):
    client.force_login(admin)
    client.post("/toolkits/secret_lab/access/", {"use": "admins"})
    secret.refresh_from_db()
    assert secret.use == Use.ADMINS


def test_the_access_form_rejects_get_and_anonymous(client, secret, alice):
    client.force_login(alice)
    assert client.get("/toolkits/secret_lab/access/").status_code == 405
    client.logout()
    assert client.post("/toolkits/secret_lab/access/", {"use": "admins"}).status_code == 302
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE


# API
# ------------------------------------------------------------------------------


def _put(client, headers, body):
    return client.put("/api/v1/toolkits/secret_lab/access", json.dumps(body), content_type="application/json", **headers)


def test_api_shows_access_and_the_owner_sets_it(client, secret, alice, carol, bearer, research):
    headers = bearer(alice)
    assert client.get("/api/v1/toolkits/secret_lab", **headers).json()["access"] == {"use": "everyone", "groups": [], "users": []}
    response = _put(client, headers, {"use": "groups", "groups": ["Research"], "users": ["carol"]})
    assert response.status_code == 200
    assert response.json()["access"] == {"use": "groups", "groups": ["Research"], "users": ["carol"]}


def test_api_refuses_unknown_names_with_the_field(client, secret, alice, bearer):
    response = _put(client, bearer(alice), {"use": "groups", "groups": ["Nope"]})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "groups"
    response = _put(client, bearer(alice), {"use": "sometimes"})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "use"


def test_api_refuses_another_user_and_anonymous(client, secret, bob, bearer):
    assert _put(client, bearer(bob), {"use": "admins"}).status_code == 403
    assert _put(client, {}, {"use": "admins"}).status_code == 401
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE


def test_api_hides_a_toolkit_from_someone_not_allowed(client, secret, public, alice, carol, bob, bearer, research):
    _restrict(secret, alice)
    headers = bearer(carol)
    assert [t["slug"] for t in client.get("/api/v1/toolkits", **headers).json()["items"]] == ["public_echo"]
    assert client.get("/api/v1/toolkits/secret_lab", **headers).status_code == 404
    invoke = client.post("/api/v1/toolkits/secret_lab/tools/echo/invoke", json.dumps({"arguments": {"text": "x"}}),
                         content_type="application/json", **headers)
    assert invoke.status_code == 404
    assert _put(client, headers, {"use": "everyone"}).status_code == 404
    # bob is in the group: the toolkit is there for him (not ready yet, hence 409 on invoke).
    headers = bearer(bob)
    assert client.get("/api/v1/toolkits/secret_lab", **headers).status_code == 200
    invoke = client.post("/api/v1/toolkits/secret_lab/tools/echo/invoke", json.dumps({"arguments": {"text": "x"}}),
                         content_type="application/json", **headers)
    assert invoke.status_code == 409


# WHERE AN INVOCATION CAME FROM
# ------------------------------------------------------------------------------


def _ready(toolkit):
    revision = toolkit.current_revision
    revision.tools = [{"type": "function", "function": {"name": "echo", "description": "Echo.", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
    revision.set_status("ready")
    revision.save()
    return toolkit


def test_invocations_say_their_surface_and_client(client, secret, alice, bearer):
    _ready(secret)
    headers = bearer(alice)
    queued = client.post("/api/v1/toolkits/secret_lab/tools/echo/invoke", json.dumps({"arguments": {"text": "x"}, "wait": False}),
                         content_type="application/json", **headers)
    assert queued.status_code == 202
    got = client.get(f"/api/v1/invocations/{queued.json()['id']}", **headers).json()
    assert (got["surface"], got["client"]) == ("api", None)
    client.force_login(alice)
    response = client.post("/toolkits/secret_lab/tools/echo/run/", {"echo__text": "from the page"})
    assert response.status_code == 302
    # The page sends the user to the run in the playground: /toolkits/<slug>/tools/?tool=…&run=<id>.
    invocation_id = parse_qs(urlsplit(response["Location"]).query)["run"][0]
    got = client.get(f"/api/v1/invocations/{invocation_id}", **headers).json()
    assert (got["surface"], got["client"]) == ("page", None)


def test_api_refuses_names_that_use_would_ignore(client, secret, alice, bearer, research):
    """`users` with `use: admins` used to be stored and silently do nothing."""
    response = _put(client, bearer(alice), {"use": "admins", "users": ["carol"]})
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "users" and "apply only with use: groups" in error["message"]
    response = _put(client, bearer(alice), {"use": "everyone", "groups": ["Research"]})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "groups"
    secret.refresh_from_db()
    assert secret.use == Use.EVERYONE and not secret.use_users.exists()
    assert _put(client, bearer(alice), {"use": "admins", "users": [], "groups": []}).status_code == 200
