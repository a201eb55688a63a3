"""The login and logout pages (Django's auth views with ToolHub's templates)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

LOGIN = reverse("login")
LOGOUT = reverse("logout")


def test_the_login_page_renders(client):
    response = client.get(LOGIN)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Log in to ToolHub" in body
    assert 'name="username"' in body
    assert 'name="password"' in body
    assert "csrfmiddlewaretoken" in body


def test_the_login_page_keeps_next(client):
    body = client.get(LOGIN, {"next": "/toolkits/new/"}).content.decode()
    assert 'name="next" value="/toolkits/new/"' in body


def test_login_works_and_lands_on_the_toolkit_list(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.get(LOGIN)
    csrf = browser.cookies["csrftoken"].value
    response = browser.post(LOGIN, {"username": "alice", "password": "pw-alice-1", "csrfmiddlewaretoken": csrf})
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_list")
    page = browser.get(reverse("toolkit_list"))
    assert page.status_code == 200
    assert "alice" in page.content.decode()
    assert "Log out" in page.content.decode()


def test_login_follows_next(client, alice):
    response = client.post(LOGIN, {"username": "alice", "password": "pw-alice-1", "next": "/account/tokens/"})
    assert response.status_code == 302
    assert response["Location"] == "/account/tokens/"


def test_login_does_not_follow_next_to_another_site(client, alice):
    response = client.post(LOGIN, {"username": "alice", "password": "pw-alice-1", "next": "https://evil.example/"})
    assert response.status_code == 302
    assert "evil.example" not in response["Location"]


def test_login_with_a_wrong_password_says_so(client, alice):
    response = client.post(LOGIN, {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Your username and password didn't match." in body
    assert 'value="alice"' in body
    assert "_auth_user_id" not in client.session


def test_login_refuses_an_inactive_user(client, alice):
    alice.is_active = False
    alice.save()
    response = client.post(LOGIN, {"username": "alice", "password": "pw-alice-1"})
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_login_without_the_csrf_token_is_refused(alice):
    browser = Client(enforce_csrf_checks=True)
    response = browser.post(LOGIN, {"username": "alice", "password": "pw-alice-1"})
    assert response.status_code == 403


def test_logout_works_by_post(client, alice):
    client.force_login(alice)
    response = client.post(LOGOUT)
    assert response.status_code == 302
    assert "_auth_user_id" not in client.session
    after = client.get(reverse("toolkit_list"))
    assert after.status_code == 302
    assert after["Location"].startswith(LOGIN)


def test_logout_rejects_get(client, alice):
    client.force_login(alice)
    assert client.get(LOGOUT).status_code == 405
    assert "_auth_user_id" in client.session


def test_every_page_offers_logout_as_a_form(client, alice):
    client.force_login(alice)
    body = client.get(reverse("toolkit_list")).content.decode()
    assert f'<form action="{LOGOUT}" method="post"' in body


def test_the_root_redirects_to_the_toolkit_list(client, alice):
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_list")
