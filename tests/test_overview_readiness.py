"""From upload to first run: the Overview says what the newest revision
waits for (and links the uploader to it, admins to the queue), keeps itself up to date while
it is on its way, and once ready offers its tools; the uploader reads the admins' decisions on
its packages there."""

from __future__ import annotations

import pytest

from tests.conftest import toolkit_source
from toolhub.toolkits import access, lifecycle
from toolhub.toolkits.models import Status, Use

pytestmark = pytest.mark.django_db

DECIDE = "/packages/decide/"


@pytest.fixture
def sizes(alice, upload):
    return upload(alice, toolkit_source("Sizes", "humanize>=4, foo-bar"), slug="sizes")


def _block(html: str) -> str:
    return html.split('<section id="readiness"')[1].split("</section>")[0]


def test_the_uploader_sees_which_packages_it_waits_for(client, alice, sizes):
    client.force_login(alice)
    block = _block(client.get("/toolkits/sizes/").content.decode())
    assert "Waiting for package approval" in block
    assert "<code>foo-bar</code>, <code>humanize</code>" in block
    assert 'href="/toolkits/sizes/environment/"' in block
    assert 'href="/packages/"' not in block
    # It keeps itself up to date.
    assert 'hx-get="/toolkits/sizes/readiness/?seen=awaiting_approval"' in block


def test_an_admin_is_sent_to_the_queue(client, admin, sizes):
    client.force_login(admin)
    block = _block(client.get("/toolkits/sizes/").content.decode())
    assert 'href="/packages/">Decide in the package queue' in block


def test_the_uploader_reads_the_decisions_and_the_block_follows_them(client, admin, alice, sizes, django_capture_on_commit_callbacks):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "approve"})
    client.force_login(alice)
    block = _block(client.get("/toolkits/sizes/readiness/?seen=awaiting_approval").content.decode())
    assert "humanize approved by admin (" in block
    assert "<code>foo-bar</code>." in block
    client.force_login(admin)
    client.post(DECIDE, {"name": "foo-bar", "action": "reject", "reason": "Unmaintained."})
    client.force_login(alice)
    response = client.get("/toolkits/sizes/readiness/?seen=awaiting_approval", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    block = _block(html)
    assert "package foo-bar was rejected: Unmaintained." in block
    assert "foo-bar rejected by admin (" in block and "humanize approved by admin" in block
    assert "hx-get" not in block
    # Settled: the page reloads once so that everything on it follows; the heading too.
    assert response["HX-Refresh"] == "true"
    assert 'id="toolkit-head" hx-swap-oob="true"' in html


def test_decisions_are_for_the_owner_and_admins(client, admin, carol, sizes):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "approve"})
    client.force_login(carol)
    block = _block(client.get("/toolkits/sizes/").content.decode())
    assert "Waiting for package approval" in block
    assert "approved by" not in block


def test_building_then_ready_with_links_to_try_its_tools(client, admin, alice, upload, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        toolkit = upload(alice, toolkit_source("Plain"), slug="plain")
    revision = toolkit.latest_revision()
    assert revision.status == Status.BUILDING
    client.force_login(alice)
    block = _block(client.get("/toolkits/plain/").content.decode())
    assert "Building" in block and 'href="/toolkits/plain/environment/"' in block
    assert "?seen=building" in block
    # The worker's steps, as the lifecycle records them.
    lifecycle.built(revision_id=revision.pk, environment_key="0" * 64)
    revision.refresh_from_db()
    lifecycle.ready(revision=revision, tools=[], valves_schema=None, user_valves_schema=None, plugin_metadata=None)
    response = client.get("/toolkits/plain/readiness/?seen=building")
    assert response["HX-Refresh"] == "true"
    block = _block(client.get("/toolkits/plain/").content.decode())
    assert "Ready — try" in block
    assert '<a href="/toolkits/plain/tools/?tool=echo"><code>echo</code></a>' in block
    assert "hx-get" not in block
    # A poll that already saw it settled does not reload again.
    assert "HX-Refresh" not in client.get("/toolkits/plain/readiness/?seen=ready")


def test_the_block_is_for_those_who_may_see_the_toolkit(client, admin, alice, bob, sizes):
    url = "/toolkits/sizes/readiness/"
    assert client.get(url).status_code == 302
    access.toolkit_set_access(toolkit=sizes, use=Use.ADMINS, groups=[], users=[], by=admin)
    client.force_login(bob)
    assert client.get(url).status_code == 404
    client.force_login(alice)
    assert client.get(url).status_code == 200
    assert client.post(url).status_code == 405
    assert client.get("/toolkits/nothing/readiness/").status_code == 404


def test_a_revision_awaiting_review_says_so(client, admin, alice, upload):
    from tests.test_revision_review import HONEST, SCHEMA, _introspected
    from toolhub.toolkits.services import revision_upload
    from toolhub.toolkits.valves import store_values

    toolkit = upload(alice, HONEST, slug="org")
    _introspected(toolkit.current_revision, SCHEMA)
    store_values(toolkit=toolkit, values={"api_key": "k"}, by=admin)
    second = _introspected(revision_upload(toolkit=toolkit, source=HONEST.replace("1.0.0", "2.0.0"), user=alice).revision, SCHEMA)
    assert second.status == Status.AWAITING_REVIEW
    client.force_login(alice)
    block = _block(client.get("/toolkits/org/").content.decode())
    assert "Waiting for an admin's review" in block
    assert 'href="/toolkits/org/revisions/"' in block and "?seen=awaiting_review" in block
    client.force_login(admin)
    block = _block(client.get("/toolkits/org/").content.decode())
    # The review queue, at this revision (its own URL takes the decision, by POST only).
    assert f'href="/packages/reviews/#review-{second.pk}"' in block
    assert f'id="review-{second.pk}"' in client.get("/packages/reviews/").content.decode()



# Every open Overview asks for its block every 2 s while the revision is on its way.
POLL_QUERIES = 6


def test_the_polled_block_makes_the_same_queries_for_two_packages_or_eight(client, admin, alice, upload, django_assert_num_queries):
    names = [f"pkg{i}" for i in range(8)]
    upload(alice, toolkit_source("Two", ", ".join(names[:2])), slug="two")
    upload(alice, toolkit_source("Eight", ", ".join(names)), slug="eight")
    client.force_login(admin)
    for name in names[1::2]:
        client.post(DECIDE, {"name": name, "action": "reject", "reason": "No."})
    client.force_login(alice)
    for slug in ("two", "eight"):
        with django_assert_num_queries(POLL_QUERIES):
            block = _block(client.get(f"/toolkits/{slug}/readiness/?seen=awaiting_approval").content.decode())
        assert "rejected by admin" in block
