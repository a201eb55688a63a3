"""The management commands of the first journey: `create_admin` and `load_demo`.
(`create_api_token` is tested with the tokens page, in test_api_tokens.py.)"""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

DEMO_SLUGS = ["bad_calculator", "friendly_sizes", "function_calling", "library_lookup", "react", "string_reverse"]


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- create_admin -----------------------------------------------------------------------------


def test_create_admin_creates_a_staff_superuser_and_prints_its_password(client):
    out = _run("create_admin")
    match = re.search(r"Created admin 'admin' with password: (\S+)", out)
    assert match, out
    user = get_user_model().objects.get(username="admin")
    assert user.is_staff and user.is_superuser and user.is_active
    assert user.check_password(match.group(1))
    # The printed password logs in.
    response = client.post(reverse("login"), {"username": "admin", "password": match.group(1)})
    assert response.status_code == 302


def test_create_admin_makes_a_new_password_each_time_it_creates_one():
    first = re.search(r"password: (\S+)", _run("create_admin", "--username", "one")).group(1)
    second = re.search(r"password: (\S+)", _run("create_admin", "--username", "two")).group(1)
    assert first != second
    assert len(first) >= 12


def test_create_admin_takes_a_username_email_and_password():
    out = _run("create_admin", "--username", "root", "--email", "root@example.org", "--password", "s3cret-pw")
    assert "s3cret-pw" in out
    user = get_user_model().objects.get(username="root")
    assert user.email == "root@example.org"
    assert user.check_password("s3cret-pw")


def test_create_admin_run_twice_keeps_the_first_admin_and_prints_no_password():
    first = _run("create_admin")
    password = re.search(r"password: (\S+)", first).group(1)
    second = _run("create_admin")
    assert "exists already" in second
    assert "password:" not in second
    assert password not in second
    assert get_user_model().objects.filter(username="admin").count() == 1
    assert get_user_model().objects.get(username="admin").check_password(password)


def test_create_admin_does_not_promote_an_existing_plain_user(carol):
    out = _run("create_admin", "--username", "carol")
    assert "exists already and is not an admin" in out
    assert "password:" not in out
    carol.refresh_from_db()
    assert not carol.is_staff
    assert carol.check_password("pw-carol-1")


# -- load_demo --------------------------------------------------------------------------------


def test_load_demo_loads_the_demo_toolkits_and_strategies(admin):
    out = _run("load_demo")
    assert sorted(Toolkit.objects.values_list("slug", flat=True)) == DEMO_SLUGS
    for slug in DEMO_SLUGS:
        assert f"Loaded {slug}" in out
    assert all(t.owner == admin for t in Toolkit.objects.all())
    assert Revision.objects.count() == len(DEMO_SLUGS)
    reverse_kit = Toolkit.objects.get(slug="string_reverse")
    assert reverse_kit.title == "String Inverse"
    assert reverse_kit.current_revision.tool_names == ["reverse_string"]
    assert reverse_kit.current_revision.manifest["license"] == "MIT"
    plugin = Toolkit.objects.get(slug="bad_calculator").current_revision
    assert plugin.kind == "ragflow"
    assert plugin.tool_names == ["bad_calculator"]
    for slug in ("function_calling", "react"):
        strategy = Toolkit.objects.get(slug=slug).current_revision
        assert (strategy.kind, strategy.tool_names) == ("agent_strategy", [])


def test_load_demo_is_idempotent(admin):
    _run("load_demo")
    before = list(Revision.objects.order_by("pk").values_list("pk", "sha256"))
    out = _run("load_demo")
    for slug in DEMO_SLUGS:
        assert f"{slug}: unchanged" in out
    assert Toolkit.objects.count() == len(DEMO_SLUGS)
    assert list(Revision.objects.order_by("pk").values_list("pk", "sha256")) == before


def test_load_demo_populates_the_toolkit_list(client, admin, carol):
    _run("load_demo")
    client.force_login(carol)
    body = client.get(reverse("toolkit_list")).content.decode()
    for slug in DEMO_SLUGS:
        assert slug in body


def test_load_demo_needs_an_admin(alice):
    with pytest.raises(CommandError, match="create_admin"):
        _run("load_demo")
    assert not Toolkit.objects.exists()


def test_load_demo_after_create_admin_works():
    _run("create_admin")
    _run("load_demo")
    assert Toolkit.objects.count() == len(DEMO_SLUGS)
