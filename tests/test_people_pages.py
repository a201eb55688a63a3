"""The admins' Users and Groups pages (toolhub.people.views) and the invitation page.

The people: admin manages; alice is an author who owns a toolkit; carol is a plain user, to
whom the admin pages do not exist (404)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from tests.conftest import toolkit_source
from toolhub.accounts.models import AUTHORS_GROUP
from toolhub.toolkits import access

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def admin_client(client, admin):
    client.force_login(admin)
    return client


def _admin_pages(group_pk: int) -> list[str]:
    return [
        "/people/", "/people/new/", "/people/user/carol/", "/groups/", f"/groups/{group_pk}/",
        f"/groups/{group_pk}/delete/",
    ]


# WHO GETS IN
# ------------------------------------------------------------------------------


def test_anonymous_people_are_sent_to_the_login(client, carol):
    group = Group.objects.create(name="g")
    for path in _admin_pages(group.pk):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), path


def test_to_a_non_admin_the_pages_do_not_exist(client, carol):
    group = Group.objects.create(name="g")
    client.force_login(carol)
    for path in _admin_pages(group.pk):
        assert client.get(path).status_code == 404, path
    for path in ("/people/user/carol/active/", "/people/user/carol/delete/", "/people/user/carol/invite/",
                 f"/groups/{group.pk}/delete/", "/groups/"):
        assert client.post(path, {"active": "no", "name": "x"}).status_code == 404, path
    carol.refresh_from_db()
    assert carol.is_active and Group.objects.filter(pk=group.pk).exists() and not Group.objects.filter(name="x").exists()


def test_a_wrong_method_is_a_405(admin_client, carol):
    group = Group.objects.create(name="g")
    for path in ("/people/user/carol/active/", "/people/user/carol/delete/", "/people/user/carol/invite/"):
        assert admin_client.get(path).status_code == 405, path
    assert admin_client.post("/people/").status_code == 405
    assert admin_client.put(f"/groups/{group.pk}/").status_code == 405


def test_the_menu_links_the_pages_for_admins_only(admin_client, client, carol):
    page = admin_client.get("/people/").content.decode()
    assert 'href="/people/"' in page and 'href="/groups/"' in page
    client.force_login(carol)
    page = client.get("/toolkits/").content.decode()
    assert 'href="/people/"' not in page


# USERS
# ------------------------------------------------------------------------------


def test_the_users_page_lists_searches_and_filters(admin_client, alice, carol):
    Group.objects.create(name="sales").user_set.add(carol)
    page = admin_client.get("/people/").content.decode()
    assert "alice@example.org" in page and "carol@example.org" in page
    page = admin_client.get("/people/?q=carol").content.decode()
    assert "carol@example.org" in page and "alice@example.org" not in page
    page = admin_client.get("/people/?role=author").content.decode()
    assert "alice@example.org" in page and "carol@example.org" not in page
    page = admin_client.get("/people/?group=sales").content.decode()
    assert "carol@example.org" in page and "alice@example.org" not in page
    carol.is_active = False
    carol.save()
    page = admin_client.get("/people/?active=no").content.decode()
    assert "carol@example.org" in page and "alice@example.org" not in page
    page = admin_client.get("/people/?source=oidc").content.decode()
    assert "No people match." in page


def test_the_users_page_pages_and_its_queries_stay_the_same(admin_client, django_user_model, django_assert_num_queries):
    group = Group.objects.create(name="many")
    for i in range(40):
        django_user_model.objects.create_user(f"p{i:02d}", f"p{i}@example.org").groups.add(group)
    admin_client.get("/people/")
    # Session, user, the menu's two counts, the groups filter, count, the page, its groups.
    with django_assert_num_queries(8):
        response = admin_client.get("/people/")
    assert response.status_code == 200
    assert "p23@example.org" in response.content.decode() and "p24@example.org" not in response.content.decode()
    assert "p24@example.org" in admin_client.get("/people/?page=2").content.decode()


def test_an_admin_adds_a_person_with_a_password(admin_client):
    Group.objects.create(name="sales")
    response = admin_client.post("/people/new/", {
        "username": "dave", "email": "dave@example.org", "role": "author", "groups": ["sales"],
        "way": "password", "password": "a long pass 1",
    })
    assert response.status_code == 302 and response["Location"] == "/people/user/dave/"
    dave = User.objects.get(username="dave")
    assert dave.check_password("a long pass 1") and dave.has_perm("toolkits.add_toolkit")
    assert list(dave.groups.values_list("name", flat=True).order_by("name")) == ["Toolkit authors", "sales"]


def test_an_invitation_link_is_shown_once_with_a_copy_button(admin_client, client):
    response = admin_client.post("/people/new/", {"username": "erin", "email": "erin@example.org", "role": "user", "way": "invite"})
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0") or "no-cache" in response["Cache-Control"]
    page = response.content.decode()
    assert 'data-copy="invite-link"' in page and "/accounts/invite/thi_" in page
    link = page.split('id="invite-link">', 1)[1].split("<", 1)[0]
    assert link not in admin_client.get("/people/user/erin/").content.decode()
    anonymous = type(client)()
    assert anonymous.get(link).status_code == 302
    assert anonymous.post("/accounts/invite/", {"password": "x", "password2": "y"}).status_code == 400
    assert anonymous.post("/accounts/invite/", {"password": "erins pass 22", "password2": "erins pass 22"}).status_code == 302
    assert anonymous.login(username="erin", password="erins pass 22")


def test_an_expired_invitation_is_refused(admin_client, client):
    from django.utils import timezone

    from toolhub.accounts.models import Invitation

    page = admin_client.post("/people/new/", {"username": "fay", "email": "fay@example.org", "way": "invite"}).content.decode()
    link = page.split('id="invite-link">', 1)[1].split("<", 1)[0]
    Invitation.objects.update(expires_at=timezone.now())
    anonymous = type(client)()
    anonymous.get(link)
    response = anonymous.post("/accounts/invite/", {"password": "fays pass 123", "password2": "fays pass 123"})
    assert response.status_code == 404 and b"not valid" in response.content
    assert not User.objects.get(username="fay").has_usable_password()


def test_a_second_account_with_the_same_email_is_refused(admin_client, carol):
    response = admin_client.post("/people/new/", {"username": "carol2", "email": "Carol@EXAMPLE.org", "way": "invite"})
    assert response.status_code == 400 and b"Another person has this email." in response.content
    assert not User.objects.filter(username="carol2").exists()
    response = admin_client.post("/people/user/admin/", {"email": "CAROL@example.org", "role": "admin"})
    assert response.status_code == 400
    assert User.objects.get(username="admin").email == "admin@example.org"


def test_a_persons_page_shows_what_they_may_use_and_their_runs(admin_client, alice, carol, upload):
    from toolhub.runs.models import Invocation

    Group.objects.create(name="readers").user_set.add(carol)
    shared = upload(alice, toolkit_source("Shared"), slug="shared")
    hidden = upload(alice, toolkit_source("Hidden"), slug="hidden")
    access.toolkit_set_access(toolkit=shared, use="groups", groups=["readers"], users=[], by=alice)
    access.toolkit_set_access(toolkit=hidden, use="admins", groups=[], users=[], by=alice)
    Invocation.objects.create(toolkit=shared, revision=shared.revisions.first(), tool="echo", user=carol, arguments={"text": "hi"})
    page = admin_client.get("/people/user/carol/").content.decode()
    assert "/toolkits/shared/" in page and "/toolkits/hidden/" not in page
    assert "<code>echo</code>" in page


def test_an_admin_changes_a_persons_role_and_groups(admin_client, carol):
    Group.objects.create(name="ops")
    response = admin_client.post("/people/user/carol/", {"email": "carol@example.org", "role": "author", "groups": ["ops"]})
    assert response.status_code == 302
    carol = User.objects.get(username="carol")
    assert carol.has_perm("toolkits.add_toolkit") and carol.groups.filter(name="ops").exists()
    admin_client.post("/people/user/carol/", {"email": "carol@example.org", "role": "user"})
    carol = User.objects.get(username="carol")
    assert not carol.has_perm("toolkits.add_toolkit") and not carol.groups.exists()


def test_deactivating_ends_their_session_and_tokens(admin_client, carol, bearer):
    from django.test import Client

    headers = bearer(carol)
    client = Client()
    client.force_login(carol)
    assert client.get("/toolkits/").status_code == 200
    page = admin_client.get("/people/user/carol/").content.decode()
    assert 'data-confirm="Deactivate this person?' in page
    assert admin_client.post("/people/user/carol/active/", {"active": "no"}).status_code == 302
    assert client.get("/toolkits/").status_code == 302  # back to the login
    assert client.get("/api/v1/toolkits", **headers).status_code == 401
    admin_client.post("/people/user/carol/active/", {"active": "yes"})
    assert client.get("/api/v1/toolkits", **headers).status_code == 200


def test_the_last_admin_cannot_demote_themself(admin_client, admin):
    response = admin_client.post("/people/user/admin/", {"email": "admin@example.org", "role": "user"})
    assert response.status_code == 400 and b"last active admin" in response.content
    admin.refresh_from_db()
    assert admin.is_staff


def test_the_last_admin_cannot_be_deactivated_by_another_path(admin_client, admin, django_user_model):
    # Deactivating is offered only on other people's pages; the service refuses it anyway.
    other = django_user_model.objects.create_user("root2", "root2@example.org", is_staff=True, is_active=False)
    assert other.is_staff
    admin_client.post("/people/user/admin/active/", {"active": "no"})
    admin.refresh_from_db()
    assert admin.is_active


def test_a_person_is_deleted_after_a_confirmation(admin_client, carol):
    page = admin_client.get("/people/user/carol/").content.decode()
    assert 'action="/people/user/carol/delete/" data-confirm=' in page
    assert admin_client.post("/people/user/carol/delete/").status_code == 302
    assert not User.objects.filter(username="carol").exists()


# GROUPS
# ------------------------------------------------------------------------------


def test_an_admin_creates_renames_and_fills_a_group(admin_client, alice, carol):
    response = admin_client.post("/groups/", {"name": "Support"})
    group = Group.objects.get(name="Support")
    assert response.status_code == 302 and response["Location"] == f"/groups/{group.pk}/"
    assert admin_client.post("/groups/", {"name": "support"}).status_code == 400
    admin_client.post(f"/groups/{group.pk}/", {"action": "add", "usernames": "alice, carol"})
    assert sorted(group.user_set.values_list("username", flat=True)) == ["alice", "carol"]
    admin_client.post(f"/groups/{group.pk}/", {"action": "remove", "username": "alice"})
    assert list(group.user_set.values_list("username", flat=True)) == ["carol"]
    assert admin_client.post(f"/groups/{group.pk}/", {"action": "add", "usernames": "nobody"}).status_code == 400
    admin_client.post(f"/groups/{group.pk}/", {"action": "rename", "name": "Help desk"})
    group.refresh_from_db()
    assert group.name == "Help desk"
    page = admin_client.get(f"/groups/{group.pk}/").content.decode()
    assert "/people/user/carol/" in page


def test_the_groups_page_lists_counts_in_fixed_queries(admin_client, django_assert_num_queries):
    for i in range(30):
        Group.objects.create(name=f"g{i:02d}")
    admin_client.get("/groups/")
    # Session, user, the menu's two counts, count, the page.
    with django_assert_num_queries(6):
        response = admin_client.get("/groups/")
    assert "g00" in response.content.decode() and "g29" not in response.content.decode()


def test_deleting_a_group_says_what_it_changes_first(admin_client, alice, carol, upload):
    group = Group.objects.create(name="readers")
    group.user_set.add(carol)
    toolkit = upload(alice, toolkit_source("Shared"), slug="shared")
    access.toolkit_set_access(toolkit=toolkit, use="groups", groups=["readers"], users=[], by=alice)
    page = admin_client.get(f"/groups/{group.pk}/delete/").content.decode()
    assert "carol" in page and "<code>shared</code>" in page
    assert Group.objects.filter(pk=group.pk).exists()
    assert admin_client.post(f"/groups/{group.pk}/delete/").status_code == 302
    assert not Group.objects.filter(pk=group.pk).exists()
    assert not access.toolkits_usable_by(carol).filter(slug="shared").exists()


def test_the_authors_group_cannot_be_deleted(admin_client):
    group, _ = Group.objects.get_or_create(name=AUTHORS_GROUP)
    admin_client.post(f"/groups/{group.pk}/delete/")
    assert Group.objects.filter(name=AUTHORS_GROUP).exists()


def test_djangos_own_admin_refuses_a_second_account_with_the_same_email(admin_client, carol):
    response = admin_client.post("/admin/auth/user/add/", {
        "username": "carol2", "email": "CAROL@example.org", "password1": "a long pass 12", "password2": "a long pass 12",
        "usable_password": "true",
    })
    assert response.status_code == 200 and b"Another person has this email." in response.content
    assert not User.objects.filter(username="carol2").exists()
    admin_client.post("/admin/auth/user/add/", {
        "username": "dora", "email": "dora@example.org", "password1": "a long pass 12", "password2": "a long pass 12",
        "usable_password": "true",
    })
    assert User.objects.filter(username="dora", email="dora@example.org").exists()


def test_a_groups_page_costs_the_same_queries_for_many_members(admin_client, django_user_model, django_assert_num_queries):
    group = Group.objects.create(name="big")
    group.user_set.add(*(django_user_model.objects.create_user(f"m{i:02d}", f"m{i}@example.org") for i in range(30)))
    admin_client.get(f"/groups/{group.pk}/")
    # Session, user, the menu's two counts, the group with its counts, its members, its toolkits.
    with django_assert_num_queries(7):
        response = admin_client.get(f"/groups/{group.pk}/")
    assert response.content.decode().count("/people/user/m") == 30
