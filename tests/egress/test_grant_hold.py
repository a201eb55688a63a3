"""An egress grant covers code an admin saw: a non-admin's new revision
waits for review, and one that becomes current unseen (a rollback) and mentions new hosts
holds the grant: its runs get no network until an admin confirms it again."""

from __future__ import annotations

import pytest

from tests.conftest import toolkit_source
from toolhub.sandbox.egress import EgressPolicy
from toolhub.toolkits import lifecycle, sandboxing
from toolhub.toolkits.models import Status, Toolkit
from toolhub.toolkits.services import revision_upload, toolkit_set_egress

pytestmark = pytest.mark.django_db


def _with_url(url: str) -> str:
    return toolkit_source("Fetcher") + f'\n\nENDPOINT = "{url}"\n'


def _ready(toolkit: Toolkit, source: str, user):
    """Upload a revision and let introspection finish, the way the worker would."""
    revision = revision_upload(toolkit=toolkit, source=source, user=user).revision
    revision.set_status(Status.BUILDING)
    revision.save()
    lifecycle.ready(revision=revision, tools=[], valves_schema=None, user_valves_schema=None, plugin_metadata=None)
    revision.refresh_from_db()
    return revision


def _current(toolkit: Toolkit):
    return Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)


@pytest.fixture
def granted(upload, alice, admin):
    toolkit = upload(alice, _with_url("https://api.example.org/v1"))
    revision = toolkit.current_revision
    revision.set_status(Status.READY)
    revision.save()
    return toolkit_set_egress(toolkit=toolkit, granted=True, hosts=[], by=admin)


def _network(toolkit) -> bool:
    toolkit = _current(toolkit)
    return sandboxing.egress_policy(toolkit, toolkit.current_revision) is not None


def test_a_non_admins_revision_with_new_hosts_waits_for_review_while_the_old_one_keeps_the_grant(granted, alice, admin):
    assert _network(granted)
    revision = _ready(granted, _with_url("https://collector.evil.example/steal"), alice)
    assert revision.status == Status.AWAITING_REVIEW
    assert "network egress grant" in revision.status_detail
    toolkit = _current(granted)
    assert toolkit.current_revision.number == 1 and _network(toolkit)
    # The admin saw the new hosts in the review queue: approving confirms them.
    lifecycle.review_decide(revision_id=revision.pk, user=admin, approve=True)
    toolkit = _current(granted)
    assert toolkit.current_revision.number == 2 and toolkit.egress_held_hosts == []
    assert _network(toolkit)


def test_an_admins_own_revision_keeps_the_grant(granted, admin):
    revision = _ready(granted, _with_url("https://other.example.com/"), admin)
    assert revision.status == Status.READY
    toolkit = _current(granted)
    assert toolkit.current_revision.number == 2 and toolkit.egress_held_hosts == []
    assert _network(toolkit)


@pytest.fixture
def held(upload, alice, admin):
    """Revision 2 (new hosts) was current before the grant; the grant was made on revision 1;
    then alice rolled back to revision 2, which no admin saw."""
    toolkit = upload(alice, _with_url("https://api.example.org/v1"))
    lifecycle.ready(revision=toolkit.current_revision, tools=[], valves_schema=None, user_valves_schema=None, plugin_metadata=None)
    _ready(toolkit, _with_url("https://collector.evil.example/steal"), alice)
    toolkit = _current(toolkit)
    lifecycle.rollback(toolkit=toolkit, revision=toolkit.revisions.get(number=1))
    toolkit = toolkit_set_egress(toolkit=_current(toolkit), granted=True, hosts=[], by=admin)
    lifecycle.rollback(toolkit=_current(toolkit), revision=toolkit.revisions.get(number=2))
    return _current(toolkit)


def test_an_unreviewed_revision_made_current_again_holds_the_grant(held, alice, admin, client):
    assert held.current_revision.number == 2
    assert held.egress_granted and held.egress_held_hosts == ["collector.evil.example"]
    assert not _network(held)
    client.force_login(alice)
    html = client.get(f"/toolkits/{held.slug}/").content.decode()
    assert 'id="egress-held"' in html and "<code>collector.evil.example</code>" in html
    # The admin confirms the grant for the code that is current now.
    toolkit = toolkit_set_egress(toolkit=held, granted=True, hosts=[], by=admin)
    assert toolkit.egress_held_hosts == []
    assert _network(toolkit)


def test_a_hold_survives_a_rollback_until_an_admin_confirms(held):
    lifecycle.rollback(toolkit=held, revision=held.revisions.get(number=1))
    toolkit = _current(held)
    # Conservative: the hold stays.
    assert "collector.evil.example" in toolkit.egress_held_hosts
    assert not _network(toolkit)


def test_the_hold_notice_is_translated(held, alice, client):
    toolkit = held
    client.force_login(alice)
    client.cookies["django_language"] = "fr"
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    assert 'id="egress-held"' in html and "Held:" not in html


def test_a_run_gets_the_grants_policy_only_while_the_grant_holds_for_its_revision(granted, alice, admin, settings):
    # The policy is what keys a warm sandbox: None (no proxy, no network) unless the grant holds.
    toolkit = _current(granted)
    assert sandboxing.egress_policy(toolkit, toolkit.current_revision) == EgressPolicy(
        allow_hosts=None,
        max_bytes=settings.TOOLHUB_EGRESS_MAX_BYTES,
        max_connections=settings.TOOLHUB_EGRESS_MAX_CONNECTIONS,
    )
    toolkit = toolkit_set_egress(toolkit=toolkit, granted=True, hosts=["api.example.org"], by=admin)
    policy = sandboxing.egress_policy(_current(toolkit), _current(toolkit).current_revision)
    assert policy is not None and policy.allow_hosts == ["api.example.org"]
    # A revision no admin uploaded or approved.
    pending = _ready(toolkit, _with_url("https://collector.evil.example/steal"), alice)
    assert not pending.entrusted and sandboxing.egress_policy(_current(toolkit), pending) is None
    # A held grant, and a withdrawn one.
    Toolkit.objects.filter(pk=toolkit.pk).update(egress_held_hosts=["collector.evil.example"])
    assert sandboxing.egress_policy(_current(toolkit), _current(toolkit).current_revision) is None
    toolkit = toolkit_set_egress(toolkit=_current(toolkit), granted=False, hosts=[], by=admin)
    assert sandboxing.egress_policy(_current(toolkit), _current(toolkit).current_revision) is None
