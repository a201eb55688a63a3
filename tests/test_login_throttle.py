"""Failed-login throttling: after too many failures a username, or an
address, is refused before its password is checked, with 429 and when to try again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from toolhub.accounts.models import LoginFailure

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def _login(client, username, password, ip="198.51.100.7", **extra):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=ip, **extra)


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_sixth_attempt_after_five_failures_is_refused_even_with_the_right_password(client, carol):
    for _ in range(5):
        response = _login(client, "carol", "wrong")
        assert response.status_code == 200
        assert "didn&#x27;t match" in response.content.decode() or "didn't match" in response.content.decode()
    response = _login(client, "carol", "pw-carol-1")
    assert response.status_code == 429
    assert "Too many failed logins. Try again in 15 minutes." in response.content.decode()
    assert not _logged_in(client)


def test_the_lock_covers_the_username_from_every_address_and_in_any_case(client, carol):
    for n in range(5):
        _login(client, "carol", "wrong", ip=f"198.51.100.{n + 1}")
    assert _login(client, "CAROL ", "pw-carol-1", ip="203.0.113.50").status_code == 429


def test_an_unknown_username_is_locked_the_same_way(client, db):
    for _ in range(5):
        _login(client, "nobody-here", "wrong")
    response = _login(client, "nobody-here", "wrong")
    assert response.status_code == 429


def test_one_locked_username_does_not_lock_another(client, carol, alice):
    for _ in range(5):
        _login(client, "carol", "wrong")
    response = _login(client, "alice", "pw-alice-1")
    assert response.status_code == 302
    assert _logged_in(client)


def test_an_address_is_locked_after_many_failures_for_any_usernames(client, carol):
    for n in range(20):
        _login(client, f"guess{n}", "wrong", ip="198.51.100.99")
    assert _login(client, "carol", "pw-carol-1", ip="198.51.100.99").status_code == 429
    assert _login(client, "carol", "pw-carol-1", ip="198.51.100.100").status_code == 302


def test_a_successful_login_clears_the_usernames_failures(client, carol):
    for _ in range(4):
        _login(client, "carol", "wrong")
    assert _login(client, "carol", "pw-carol-1").status_code == 302
    client.logout()
    for _ in range(4):
        _login(client, "carol", "wrong")
    assert _login(client, "carol", "pw-carol-1").status_code == 302


def test_the_lock_ends_when_the_failures_leave_the_window(client, carol, settings):
    for _ in range(5):
        _login(client, "carol", "wrong")
    assert _login(client, "carol", "pw-carol-1").status_code == 429
    LoginFailure.objects.update(at=timezone.now() - timedelta(seconds=settings.TOOLHUB_LOGIN_WINDOW_SECONDS + 1))
    assert _login(client, "carol", "pw-carol-1").status_code == 302


def test_old_failures_are_deleted_as_new_ones_are_written(client, carol, settings):
    LoginFailure.objects.create(username="old", at=timezone.now() - timedelta(days=2))
    _login(client, "carol", "wrong")
    assert list(LoginFailure.objects.values_list("username", flat=True)) == ["carol"]


def test_the_lock_message_is_translated(client, carol):
    for _ in range(5):
        _login(client, "carol", "wrong")
    client.cookies["django_language"] = "fr"
    response = _login(client, "carol", "pw-carol-1")
    assert response.status_code == 429
    assert "Too many failed logins" not in response.content.decode()


def test_the_login_page_still_answers_get(client, db):
    assert client.get(reverse("login")).status_code == 200
