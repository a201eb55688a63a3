"""`/api/v1/users` and `/api/v1/groups` (toolhub.api.people): admins only, anyone else 404.

The people: admin manages; alice is an author; carol a plain user, who gets 404 everywhere."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from tests.conftest import toolkit_source
from toolhub.accounts import clients
from toolhub.accounts.models import AUTHORS_GROUP, Invitation

pytestmark = pytest.mark.django_db
User = get_user_model()


def _send(client, method, path, body=None, **headers):
    if method == "get":
        return client.get(path, **headers)
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method)(path, data, content_type="application/json", **headers)


@pytest.fixture
def as_admin(client, admin, bearer):
    headers = bearer(admin)

    def call(method, path, body=None):
        return _send(client, method, path, body, **headers)

    return call


# USERS
# ------------------------------------------------------------------------------


def test_an_admin_lists_the_people_with_role_groups_and_source(as_admin, alice, carol):
    staff = Group.objects.create(name="staff")
    carol.groups.add(staff)
    clients.client_create(name="Open WebUI", by=None)  # Its service user is not a person.
    response = as_admin("get", "/api/v1/users")
    assert response.status_code == 200
    body = response.json()
    assert [u["username"] for u in body["items"]] == ["admin", "alice", "carol"]
    by_name = {u["username"]: u for u in body["items"]}
    assert by_name["admin"]["role"] == "admin"
    assert by_name["alice"]["role"] == "author"
    assert by_name["carol"] == {
        "username": "carol", "email": "carol@example.org", "role": "user", "groups": ["staff"],
        "active": True, "last_login": None, "source": "local",
    }
    assert body["next_cursor"] is None


def test_the_list_pages_with_a_cursor_and_searches(as_admin, alice, bob, carol):
    first = as_admin("get", "/api/v1/users?limit=2").json()
    assert [u["username"] for u in first["items"]] == ["admin", "alice"]
    second = as_admin("get", f"/api/v1/users?limit=2&cursor={first['next_cursor']}").json()
    assert [u["username"] for u in second["items"]] == ["bob", "carol"]
    assert second["next_cursor"] is None
    assert [u["username"] for u in as_admin("get", "/api/v1/users?q=CAROL@").json()["items"]] == ["carol"]
    assert [u["username"] for u in as_admin("get", "/api/v1/users?role=author").json()["items"]] == ["alice", "bob"]


def test_a_cursor_it_did_not_make_is_a_400(as_admin):
    response = as_admin("get", "/api/v1/users?cursor=%25%25%25")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "cursor"


def test_the_list_costs_the_same_queries_for_3_or_30_people(as_admin, django_user_model, django_assert_num_queries):
    group = Group.objects.create(name="g")
    for i in range(30):
        django_user_model.objects.create_user(f"p{i:02d}", f"p{i}@example.org").groups.add(group)
    as_admin("get", "/api/v1/users")  # warm the token's last-used write
    # The token and its user, the page, its groups.
    with django_assert_num_queries(3):
        assert len(as_admin("get", "/api/v1/users?limit=50").json()["items"]) == 31


def test_an_admin_creates_a_person_with_a_password(as_admin, client):
    Group.objects.create(name="sales")
    response = as_admin("post", "/api/v1/users", {
        "username": "dave", "email": "Dave@Example.org", "role": "author", "groups": ["sales"], "password": "a long pass 1",
    })
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["role"] == "author" and body["groups"] == ["sales"] and body["invitation_url"] is None
    dave = User.objects.get(username="dave")
    assert dave.groups.filter(name=AUTHORS_GROUP).exists() and dave.check_password("a long pass 1")
    assert dave.has_perm("toolkits.add_toolkit")


def test_an_invitation_link_is_shown_once_and_sets_the_password(as_admin, client):
    response = as_admin("post", "/api/v1/users", {"username": "erin", "email": "erin@example.org", "invite": True})
    assert response.status_code == 201
    url = response.json()["invitation_url"]
    assert url.startswith("http://testserver/accounts/invite/thi_")
    erin = User.objects.get(username="erin")
    assert not erin.has_usable_password()
    raw = url.rstrip("/").rsplit("/", 1)[1]
    assert not Invitation.objects.filter(digest=raw).exists()  # only its digest is kept
    client.logout()
    page = client.get(url, follow=True)
    assert page.status_code == 200 and b"Choose your password" in page.content
    assert raw.encode() not in page.content
    done = client.post("/accounts/invite/", {"password": "erins secret 9", "password2": "erins secret 9"})
    assert done.status_code == 302
    erin.refresh_from_db()
    assert erin.check_password("erins secret 9")
    # Used once.
    client.get(url)
    assert client.get("/accounts/invite/").status_code == 404


def test_two_people_cannot_share_an_email_whatever_its_case(as_admin, carol):
    response = as_admin("post", "/api/v1/users", {"username": "carol2", "email": "CAROL@example.org", "password": "a long pass 1"})
    assert response.status_code == 409
    assert response.json()["errors"][0]["field"] == "email"
    response = as_admin("patch", "/api/v1/users/admin", {"email": "Carol@Example.org"})
    assert response.status_code == 409
    assert not User.objects.filter(username="carol2").exists()


def test_a_password_or_an_invitation_but_not_both_nor_neither(as_admin):
    assert as_admin("post", "/api/v1/users", {"username": "x", "email": "x@example.org"}).status_code == 400
    both = {"username": "x", "email": "x@example.org", "password": "a long pass 1", "invite": True}
    assert as_admin("post", "/api/v1/users", both).status_code == 400
    assert not User.objects.filter(username="x").exists()


def test_hostile_input_is_a_clear_400_and_changes_nothing(as_admin):
    for body in (
        {"username": "bad name!", "email": "b@example.org", "invite": True},
        {"username": "b", "email": "not-an-email", "invite": True},
        {"username": "b", "email": "b@example.org", "invite": True, "role": "root"},
        {"username": "b", "email": "b@example.org", "invite": True, "groups": ["nope"]},
        {"username": "b", "email": "b@example.org", "invite": True, "extra": 1},
        {"username": "b", "email": "b@example.org", "password": "short"},
    ):
        response = as_admin("post", "/api/v1/users", body)
        assert response.status_code == 400, body
        assert response.json()["errors"][0]["message"]
    assert not User.objects.filter(username__in=["b", "bad name!"]).exists()


def test_an_admin_changes_role_and_groups(as_admin, carol, alice):
    Group.objects.create(name="ops")
    response = as_admin("patch", "/api/v1/users/carol", {"role": "admin", "groups": ["ops"]})
    assert response.status_code == 200
    assert response.json()["role"] == "admin" and response.json()["groups"] == ["ops"]
    response = as_admin("patch", "/api/v1/users/alice", {"role": "user"})
    assert response.json()["role"] == "user"
    alice = User.objects.get(username="alice")
    assert not alice.has_perm("toolkits.add_toolkit")


def test_a_deactivated_persons_tokens_stop_at_once(as_admin, client, carol, bearer):
    headers = bearer(carol)
    assert client.get("/api/v1/toolkits", **headers).status_code == 200
    assert as_admin("patch", "/api/v1/users/carol", {"active": False}).json()["active"] is False
    assert client.get("/api/v1/toolkits", **headers).status_code == 401


def test_the_last_active_admin_cannot_be_demoted_deactivated_or_deleted(as_admin, admin, carol):
    for body in ({"role": "user"}, {"active": False}):
        response = as_admin("patch", "/api/v1/users/admin", body)
        assert response.status_code == 409, body
        assert "last active admin" in response.json()["errors"][0]["message"]
    admin.refresh_from_db()
    assert admin.is_staff and admin.is_active
    # With a second admin, the first may step down.
    as_admin("patch", "/api/v1/users/carol", {"role": "admin"})
    assert as_admin("patch", "/api/v1/users/admin", {"role": "author"}).status_code == 200


def test_a_person_without_toolkits_or_runs_is_deleted(as_admin, carol):
    assert as_admin("delete", "/api/v1/users/carol").status_code == 204
    assert not User.objects.filter(username="carol").exists()
    assert as_admin("delete", "/api/v1/users/carol").status_code == 404


def test_a_person_who_owns_toolkits_is_kept(as_admin, alice, upload):
    upload(alice, toolkit_source("Echo"))
    response = as_admin("delete", "/api/v1/users/alice")
    assert response.status_code == 409
    assert "deactivate" in response.json()["errors"][0]["message"]
    assert User.objects.filter(username="alice").exists()


def test_a_client_credentials_service_user_is_not_a_person(as_admin):
    credential, _raw = clients.client_create(name="LibreChat", by=None)
    name = credential.service_user.username
    assert as_admin("get", f"/api/v1/users/{name}").status_code == 404
    assert as_admin("patch", f"/api/v1/users/{name}", {"active": False}).status_code == 404


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/api/v1/users"), ("post", "/api/v1/users"), ("get", "/api/v1/users/carol"),
    ("patch", "/api/v1/users/carol"), ("delete", "/api/v1/users/carol"),
    ("get", "/api/v1/groups"), ("post", "/api/v1/groups"), ("get", "/api/v1/groups/g"),
    ("patch", "/api/v1/groups/g"), ("delete", "/api/v1/groups/g"),
])
def test_a_non_admin_gets_404_and_anonymous_401(client, carol, bearer, method, path):
    Group.objects.create(name="g")
    if "groups" in path:
        body = {"name": "h"}
    elif method == "patch":
        body = {"active": False}
    else:
        body = {"username": "z", "email": "z@example.org", "invite": True}
    response = _send(client, method, path, body, **bearer(carol))
    assert response.status_code == 404
    assert _send(client, method, path, body).status_code == 401
    assert Group.objects.filter(name="g").exists() and User.objects.filter(username="carol", is_active=True).exists()


def test_a_wrong_method_is_a_405_in_the_error_shape(as_admin):
    response = as_admin("put", "/api/v1/users", {})
    assert response.status_code == 405
    assert response.json()["errors"][0]["message"].startswith("Method PUT is not allowed")


# GROUPS
# ------------------------------------------------------------------------------


def test_an_admin_creates_renames_and_deletes_a_group(as_admin, carol, alice):
    response = as_admin("post", "/api/v1/groups", {"name": "Support", "members": ["carol"]})
    assert response.status_code == 201
    assert response.json() == {"name": "Support", "member_count": 1, "toolkits": [], "members": ["carol"]}
    response = as_admin("patch", "/api/v1/groups/Support", {"name": "Help desk", "add": ["alice"], "remove": ["carol"]})
    assert response.status_code == 200
    assert response.json()["members"] == ["alice"] and response.json()["name"] == "Help desk"
    listed = as_admin("get", "/api/v1/groups").json()
    assert {g["name"] for g in listed["items"]} >= {"Help desk"} and listed["next_cursor"] is None
    assert as_admin("delete", "/api/v1/groups/Help desk").status_code == 204
    assert not Group.objects.filter(name="Help desk").exists()


def test_a_group_lists_the_toolkits_whose_access_names_it(as_admin, alice, upload):
    from toolhub.toolkits import access

    group = Group.objects.create(name="readers")
    toolkit = upload(alice, toolkit_source("Echo"))
    access.toolkit_set_access(toolkit=toolkit, use="groups", groups=["readers"], users=[], by=alice)
    assert as_admin("get", "/api/v1/groups/readers").json()["toolkits"] == [toolkit.slug]
    assert group.usable_toolkits.count() == 1


def test_group_names_are_unique_and_the_authors_group_stays(as_admin):
    as_admin("post", "/api/v1/groups", {"name": "ops"})
    assert as_admin("post", "/api/v1/groups", {"name": "OPS"}).status_code == 409
    Group.objects.get_or_create(name=AUTHORS_GROUP)
    assert as_admin("delete", f"/api/v1/groups/{AUTHORS_GROUP}").status_code == 409
    assert as_admin("patch", f"/api/v1/groups/{AUTHORS_GROUP}", {"name": "x"}).status_code == 409


def test_an_unknown_member_creates_nothing(as_admin):
    response = as_admin("post", "/api/v1/groups", {"name": "ghosts", "members": ["nobody"]})
    assert response.status_code == 400
    assert not Group.objects.filter(name="ghosts").exists()


def test_the_group_list_costs_the_same_queries_for_many_groups(as_admin, django_assert_num_queries):
    for i in range(20):
        Group.objects.create(name=f"g{i:02d}")
    as_admin("get", "/api/v1/groups")
    # The token and its user, the page, the toolkits naming its groups.
    with django_assert_num_queries(3):
        assert len(as_admin("get", "/api/v1/groups").json()["items"]) >= 20


def test_a_run_queued_before_deactivation_still_finishes(as_admin, carol, alice, upload, build):
    """Deactivating stops new calls, not the ones already accepted: the worker's task runs the
    queued invocation of a deactivated person to its end (here in this process, in the sandbox)."""
    from toolhub.runs.models import RunStatus
    from toolhub.runs.services import invocation_create
    from toolhub.runs.tasks import run_invocation

    toolkit = build(upload(alice, toolkit_source("Echo")))
    invocation = invocation_create(toolkit=toolkit, tool="echo", arguments={"text": "still here"}, user=carol)
    assert as_admin("patch", "/api/v1/users/carol", {"active": False}).status_code == 200
    run_invocation.run(str(invocation.id))
    invocation.refresh_from_db()
    assert invocation.status == RunStatus.SUCCEEDED, invocation.error
    assert invocation.result == "still here"


def test_an_app_acting_for_a_deactivated_person_is_refused(as_admin, carol, admin):
    _credential, raw = clients.client_create(name="Open WebUI", acts_for_users=True, by=admin)
    headers = {"X-OpenWebUI-User-Email": "carol@example.org"}
    assert clients.resolve_caller(token=raw, headers=headers).user == carol
    as_admin("patch", "/api/v1/users/carol", {"active": False})
    with pytest.raises(clients.CallerRefused) as refused:
        clients.resolve_caller(token=raw, headers=headers)
    assert refused.value.status == 403
