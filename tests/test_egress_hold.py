"""An egress grant is held when a non-admin's new revision mentions new hosts (issue 15,
finding 6): its runs get no network until an admin confirms the grant again."""

from __future__ import annotations

import pytest

from tests.conftest import toolkit_source
from toolhub.toolkits import lifecycle, sandboxing
from toolhub.toolkits.models import Status, Toolkit
from toolhub.toolkits.services import revision_upload, toolkit_set_egress

pytestmark = pytest.mark.django_db


def _with_url(url: str) -> str:
    return toolkit_source("Fetcher") + f'\n\nENDPOINT = "{url}"\n'


def _ready_and_current(toolkit: Toolkit, source: str, user) -> Toolkit:
    revision = revision_upload(toolkit=toolkit, source=source, user=user).revision
    revision.set_status(Status.READY)
    revision.save()
    lifecycle.promote(revision=revision)
    return Toolkit.objects.get(pk=toolkit.pk)


@pytest.fixture
def granted(upload, alice, admin):
    toolkit = upload(alice, _with_url("https://api.example.org/v1"))
    revision = toolkit.current_revision
    revision.set_status(Status.READY)
    revision.save()
    return toolkit_set_egress(toolkit=toolkit, granted=True, hosts=[], by=admin)


def _network(toolkit) -> bool:
    with sandboxing.egress_for(toolkit) as (binds, request, handle):
        return bool(binds) and request is not None


def test_a_non_admins_revision_with_new_hosts_holds_the_grant(granted, alice, admin, client):
    assert _network(granted)
    toolkit = _ready_and_current(granted, _with_url("https://collector.evil.example/steal"), alice)
    assert toolkit.current_revision.number == 2
    assert toolkit.egress_granted and toolkit.egress_held_hosts == ["collector.evil.example"]
    assert not _network(toolkit)
    client.force_login(alice)
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    assert 'id="egress-held"' in html and "<code>collector.evil.example</code>" in html
    # The admin confirms the grant for the new code.
    toolkit = toolkit_set_egress(toolkit=toolkit, granted=True, hosts=[], by=admin)
    assert toolkit.egress_held_hosts == []
    assert _network(Toolkit.objects.get(pk=toolkit.pk))


def test_a_revision_without_new_hosts_keeps_the_grant(granted, alice):
    toolkit = _ready_and_current(granted, _with_url("https://api.example.org/v2"), alice)
    assert toolkit.current_revision.number == 2
    assert toolkit.egress_held_hosts == []
    assert _network(toolkit)


def test_an_admins_own_revision_keeps_the_grant(granted, admin):
    toolkit = _ready_and_current(granted, _with_url("https://other.example.com/"), admin)
    assert toolkit.egress_held_hosts == []


def test_a_hold_survives_a_rollback_until_an_admin_confirms(granted, alice):
    toolkit = _ready_and_current(granted, _with_url("https://collector.evil.example/"), alice)
    lifecycle.rollback(toolkit=toolkit, revision=toolkit.revisions.get(number=1))
    toolkit = Toolkit.objects.get(pk=toolkit.pk)
    # Conservative: the hold stays, and hosts new against the revision before are added.
    assert "collector.evil.example" in toolkit.egress_held_hosts
    assert not _network(toolkit)


def test_the_hold_notice_is_translated(granted, alice, client):
    toolkit = _ready_and_current(granted, _with_url("https://collector.evil.example/"), alice)
    client.force_login(alice)
    client.cookies["django_language"] = "fr"
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    assert 'id="egress-held"' in html and "Held:" not in html
