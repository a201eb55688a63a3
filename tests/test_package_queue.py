"""The package approval queue: the admin page at /packages/ and the Packages API.

The people (tests/conftest.py): admin decides; alice and bob upload toolkits; carol may only
view. Nothing here builds an environment: decisions only move revisions along, and the
build task they queue is captured, not run (tests/test_builds.py runs builds).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import toolkit_source
from toolhub.packages.models import Approval, Decision, Package, PackageRequest
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

QUEUE = "/packages/"
DECIDE = "/packages/decide/"


@pytest.fixture
def sizes(alice, upload):
    """alice's toolkit that needs humanize only."""
    return upload(alice, toolkit_source("Sizes", "humanize>=4"), slug="sizes")


@pytest.fixture
def bars(bob, upload):
    """bob's toolkit that needs two packages, one spelled unnormalised."""
    return upload(bob, toolkit_source("Bars", "Foo_Bar>=1.2, humanize"), slug="bars")


def _status(toolkit) -> str:
    revision = toolkit.latest_revision()
    revision.refresh_from_db()
    return revision.status


def _detail(toolkit) -> str:
    revision = toolkit.latest_revision()
    revision.refresh_from_db()
    return revision.status_detail


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# THE QUEUE PAGE
# ------------------------------------------------------------------------------------------


def test_uploads_with_unapproved_packages_wait_in_the_queue(sizes, bars):
    assert _status(sizes) == Status.AWAITING_APPROVAL
    assert "humanize" in _detail(sizes)
    assert _status(bars) == Status.AWAITING_APPROVAL
    assert "foo-bar, humanize" in _detail(bars)
    assert sorted(Package.objects.values_list("name", "status")) == [
        ("foo-bar", Approval.PENDING),
        ("humanize", Approval.PENDING),
    ]


def test_it_lists_pending_packages_with_the_toolkits_and_specifiers_that_ask(client, admin, sizes, bars):
    client.force_login(admin)
    response = client.get(QUEUE)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-package="foo-bar"' in html
    assert 'data-package="humanize"' in html
    # Each request names its toolkit, revision and the specifier the toolkit wrote.
    packages = {p.name: p for p in response.context["packages"]}
    humanize = {(r.revision.toolkit.slug, r.revision.number, r.specifier) for r in packages["humanize"].requests.all()}
    assert humanize == {("sizes", 1, ">=4"), ("bars", 1, "")}
    assert [(r.revision.toolkit.slug, r.specifier) for r in packages["foo-bar"].requests.all()] == [("bars", ">=1.2")]
    assert "<code>&gt;=4</code>" in html
    assert "any version" in html
    assert 'href="/toolkits/sizes/environment/"' in html


def test_it_approves_a_package_with_a_constraint(client, admin, sizes, django_capture_on_commit_callbacks):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(DECIDE, {"name": "humanize", "action": "approve", "constraint": ">=4,<5"}, follow=True)
    assert response.redirect_chain == [(QUEUE, 302)]
    assert "Approved: humanize" in _messages(response)
    package = Package.objects.get(name="humanize")
    assert (package.status, package.constraint, package.reviewed_by) == (Approval.APPROVED, ">=4,<5", admin)
    assert package.reviewed_at is not None
    # All of the toolkit's packages are approved now, so its build is queued once the
    # decision commits.
    assert _status(sizes) == Status.BUILDING
    assert len(callbacks) == 1
    assert 'data-package="humanize"' not in response.content.decode()


def test_a_partial_approval_leaves_the_revision_waiting(client, admin, bars, django_capture_on_commit_callbacks):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(DECIDE, {"name": "humanize", "action": "approve"})
    assert _status(bars) == Status.AWAITING_APPROVAL
    assert _detail(bars) == "Waiting for an admin to approve: foo-bar"
    assert callbacks == []


def test_it_approves_several_packages_at_once(client, admin, sizes, bars, django_capture_on_commit_callbacks):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(DECIDE, {"name": ["humanize", "foo-bar"], "action": "approve"}, follow=True)
    assert "Approved: humanize, foo-bar" in _messages(response)
    assert set(Package.objects.values_list("status", flat=True)) == {Approval.APPROVED}
    assert Decision.objects.count() == 2
    assert _status(sizes) == _status(bars) == Status.BUILDING
    # One build per revision, however many of its packages were decided together.
    assert len(callbacks) == 2
    assert "No packages here." in response.content.decode()


def test_it_rejects_a_package_with_a_reason_the_author_sees(client, admin, alice, sizes, bars):
    client.force_login(admin)
    response = client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "Use the stdlib instead."}, follow=True)
    assert "Rejected: humanize" in _messages(response)
    package = Package.objects.get(name="humanize")
    assert (package.status, package.reason, package.reviewed_by) == (Approval.REJECTED, "Use the stdlib instead.", admin)
    assert _status(sizes) == _status(bars) == Status.REJECTED
    assert _detail(sizes) == "package humanize was rejected: Use the stdlib instead."

    client.force_login(alice)
    page = client.get("/toolkits/sizes/environment/").content.decode()
    assert 'data-status="rejected"' in page
    assert "package humanize was rejected: Use the stdlib instead." in page


def test_approving_a_rejected_package_lets_waiting_revisions_build(client, admin, sizes, django_capture_on_commit_callbacks):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "Not yet."})
    assert _status(sizes) == Status.REJECTED
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(DECIDE, {"name": "humanize", "action": "approve"})
    assert _status(sizes) == Status.BUILDING
    assert len(callbacks) == 1


def test_it_shows_the_history_of_decisions(client, admin, sizes, bars):
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanize", "action": "approve", "constraint": "<5"})
    client.post(DECIDE, {"name": "foo-bar", "action": "reject", "reason": "Unmaintained since 2019."})
    response = client.get(QUEUE)
    history = [(d.package.name, d.status, d.constraint, d.reason, d.decided_by.username) for d in response.context["decisions"]]
    assert history == [
        ("foo-bar", Approval.REJECTED, "", "Unmaintained since 2019.", "admin"),
        ("humanize", Approval.APPROVED, "<5", "", "admin"),
    ]
    html = response.content.decode()
    assert "Unmaintained since 2019." in html
    assert "No packages here." in html
    assert response.context["statuses"] == [
        ("pending", "Pending (0)"), ("approved", "Approved (1)"), ("rejected", "Rejected (1)"),
    ]
    approved = client.get(QUEUE, {"status": "approved"})
    assert [p.name for p in approved.context["packages"]] == ["humanize"]
    rejected = client.get(QUEUE, {"status": "rejected"}).content.decode()
    assert 'data-package="foo-bar"' in rejected


def test_an_unknown_status_shows_the_pending_packages(client, admin, sizes):
    client.force_login(admin)
    response = client.get(QUEUE, {"status": "<script>"})
    assert response.status_code == 200
    assert response.context["status"] == "pending"
    assert "<script>" not in response.content.decode()


def test_the_pages_of_a_status_keep_that_status(client, admin):
    Package.objects.bulk_create(Package(name=f"pkg-{i:02d}", status=Approval.REJECTED) for i in range(51))
    client.force_login(admin)
    first = client.get("/packages/?status=rejected").content.decode()
    assert "Page 1 of 2" in first and 'href="?status=rejected&amp;page=2" rel="next"' in first
    second = client.get("/packages/?status=rejected&page=2").content.decode()
    assert "<code>pkg-50</code>" in second and 'href="?status=rejected&amp;page=1" rel="prev"' in second


def test_an_invalid_constraint_is_refused_and_changes_nothing(client, admin, sizes, bars, django_capture_on_commit_callbacks):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            DECIDE, {"name": ["humanize", "foo-bar"], "action": "approve", "constraint": "newest please"}, follow=True
        )
    [message] = _messages(response)
    assert "'newest please' is not a version specifier" in message
    assert set(Package.objects.values_list("status", flat=True)) == {Approval.PENDING}
    assert not Decision.objects.exists()
    assert _status(sizes) == _status(bars) == Status.AWAITING_APPROVAL
    assert callbacks == []


def test_rejecting_without_a_reason_is_refused(client, admin, sizes):
    client.force_login(admin)
    response = client.post(DECIDE, {"name": "humanize", "action": "reject", "reason": "   "}, follow=True)
    assert _messages(response) == ["Give a reason for rejecting; the toolkit's author will see it."]
    assert Package.objects.get(name="humanize").status == Approval.PENDING
    assert not Decision.objects.exists()
    assert _status(sizes) == Status.AWAITING_APPROVAL


def test_deciding_with_nothing_selected_is_refused(client, admin, sizes):
    client.force_login(admin)
    response = client.post(DECIDE, {"action": "approve"}, follow=True)
    assert _messages(response) == ["Choose at least one package and an action."]
    response = client.post(DECIDE, {"name": "humanize", "action": "delete"}, follow=True)
    assert _messages(response) == ["Choose at least one package and an action."]
    assert not Decision.objects.exists()


def test_an_invalid_package_name_is_refused(client, admin, sizes):
    client.force_login(admin)
    response = client.post(DECIDE, {"name": ["humanize", "not a name"], "action": "approve"}, follow=True)
    [message] = _messages(response)
    assert "'not a name' is not a valid package name" in message
    assert list(Package.objects.values_list("name", "status")) == [("humanize", Approval.PENDING)]


def test_the_decision_normalises_names(client, admin, bars):
    client.force_login(admin)
    client.post(DECIDE, {"name": ["Foo_Bar", "HUMANIZE"], "action": "approve"})
    assert sorted(Package.objects.values_list("name", "status")) == [
        ("foo-bar", Approval.APPROVED), ("humanize", Approval.APPROVED),
    ]
    assert _status(bars) == Status.BUILDING


@pytest.mark.parametrize("user", ["alice", "carol"])
def test_non_admins_get_404_everywhere(client, request, user, sizes):
    client.force_login(request.getfixturevalue(user))
    assert client.get(QUEUE).status_code == 404
    assert client.get(QUEUE, {"status": "approved"}).status_code == 404
    assert client.post(DECIDE, {"name": "humanize", "action": "approve"}).status_code == 404
    # The decide endpoint does not even admit that it exists to a wrong method.
    assert client.get(DECIDE).status_code == 404
    assert Package.objects.get(name="humanize").status == Approval.PENDING
    assert _status(sizes) == Status.AWAITING_APPROVAL
    assert "/packages/" not in client.get("/toolkits/").content.decode()


def test_anonymous_visitors_are_sent_to_log_in(client, sizes):
    response = client.get(QUEUE)
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/packages/"
    response = client.post(DECIDE, {"name": "humanize", "action": "approve"})
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert Package.objects.get(name="humanize").status == Approval.PENDING


def test_it_rejects_get_on_the_decide_endpoint(client, admin):
    client.force_login(admin)
    assert client.get(DECIDE).status_code == 405


def test_the_admin_sees_a_link_to_the_queue(client, admin):
    client.force_login(admin)
    assert 'href="/packages/"' in client.get("/toolkits/").content.decode()


def _waiting_toolkits(upload, user, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        upload(user, toolkit_source(f"Many {i}", f"pkg-{i}>=1, shared-{i % 3}, humanize"), slug=f"many_{i}")


def _queue_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(QUEUE)
    assert response.status_code == 200
    return len(queries)


def test_the_queue_page_makes_a_fixed_number_of_queries(client, admin, alice, bob, upload):
    client.force_login(admin)
    _waiting_toolkits(upload, alice, 2)
    few = _queue_queries(client)
    client.post(DECIDE, {"name": "pkg-0", "action": "approve", "constraint": "<2"})
    _waiting_toolkits(upload, bob, 12, start=2)
    client.post(DECIDE, {"name": ["pkg-3", "pkg-4"], "action": "reject", "reason": "no"})
    assert PackageRequest.objects.count() > 30
    assert _queue_queries(client) == few
    assert few <= 9  # with the count of revisions to review beside the packages


# THE PACKAGES API
# ------------------------------------------------------------------------------------------

API = "/api/v1/packages"


def test_the_api_lists_packages_by_status(client, admin, bearer, sizes, bars):
    headers = bearer(admin)
    client.post(f"{API}/humanize/approve", {"constraint": ">=4"}, content_type="application/json", **headers)
    response = client.get(API, {"status": "pending"}, **headers)
    assert response.status_code == 200
    assert response.json() == {
        "items": [
            {
                "name": "foo-bar",
                "status": "pending",
                "constraint": "",
                "source_build": False,
                "requested_by": [{"toolkit": "bars", "revision": 1, "specifier": ">=1.2"}],
                "requested_count": 1,
                "reviewed_by": None,
                "reason": "",
                # Not looked up: the tests' builds use no index (tests/test_package_index.py).
                "index": {
                    "state": "unchecked", "checked_at": None, "index": "", "version": "", "released": "",
                    "summary": "", "license": "", "wheel": None, "dependencies": None, "requires": [], "error": "",
                },
            }
        ],
        "count": 1,
        "next_offset": None,
    }
    [approved] = client.get(API, {"status": "approved"}, **headers).json()["items"]
    assert (approved["name"], approved["constraint"], approved["reviewed_by"]) == ("humanize", ">=4", "admin")
    assert sorted(approved["requested_by"], key=lambda r: r["toolkit"]) == [
        {"toolkit": "bars", "revision": 1, "specifier": ""},
        {"toolkit": "sizes", "revision": 1, "specifier": ">=4"},
    ]
    assert client.get(API, {"status": "rejected"}, **headers).json() == {"items": [], "count": 0, "next_offset": None}
    assert [p["name"] for p in client.get(API, **headers).json()["items"]] == ["foo-bar", "humanize"]


def test_the_api_approves_and_the_revision_moves_on(client, admin, bearer, sizes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(f"{API}/humanize/approve", {}, content_type="application/json", **bearer(admin))
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["constraint"] == ""
    assert _status(sizes) == Status.BUILDING
    assert len(callbacks) == 1
    assert Decision.objects.get().decided_by == admin


def test_the_api_normalises_package_names(client, admin, bearer, bars):
    headers = bearer(admin)
    response = client.post(f"{API}/Foo_Bar/approve", {"constraint": "<2"}, content_type="application/json", **headers)
    assert response.status_code == 200
    assert response.json()["name"] == "foo-bar"
    response = client.post(f"{API}/Foo.BAR/approve", {"constraint": "<3"}, content_type="application/json", **headers)
    assert response.json()["name"] == "foo-bar"
    assert list(Package.objects.filter(name__icontains="bar").values_list("name", "constraint")) == [("foo-bar", "<3")]


def test_the_api_rejects_with_a_reason(client, admin, bearer, sizes):
    response = client.post(
        f"{API}/humanize/reject", {"reason": "Licence not cleared."}, content_type="application/json", **bearer(admin)
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["reason"]) == ("rejected", "Licence not cleared.")
    assert _status(sizes) == Status.REJECTED
    assert _detail(sizes) == "package humanize was rejected: Licence not cleared."


def test_the_api_refuses_a_rejection_without_a_reason(client, admin, bearer, sizes):
    response = client.post(f"{API}/humanize/reject", {}, content_type="application/json", **bearer(admin))
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "reason"
    assert Package.objects.get(name="humanize").status == Approval.PENDING


def test_the_api_refuses_a_blank_reason(client, admin, bearer, sizes):
    response = client.post(f"{API}/humanize/reject", {"reason": "   "}, content_type="application/json", **bearer(admin))
    assert Package.objects.get(name="humanize").status == Approval.PENDING
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "reason"


def test_the_api_refuses_an_invalid_package_name(client, admin, bearer):
    response = client.post(f"{API}/not%20a%20name/approve", {}, content_type="application/json", **bearer(admin))
    assert not Package.objects.exists()
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "name"


def test_the_api_refuses_an_invalid_constraint(client, admin, bearer, sizes):
    response = client.post(
        f"{API}/humanize/approve", {"constraint": "latest"}, content_type="application/json", **bearer(admin)
    )
    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {"message": "'latest' is not a version specifier (e.g. >=2,<3).", "field": "constraint", "line": None}
        ]
    }
    assert Package.objects.get(name="humanize").status == Approval.PENDING
    assert _status(sizes) == Status.AWAITING_APPROVAL


def test_the_api_refuses_an_unknown_status(client, admin, bearer):
    response = client.get(API, {"status": "maybe"}, **bearer(admin))
    assert response.status_code == 400
    assert response.json() == {
        "errors": [{"message": "Input should be 'pending', 'approved' or 'rejected'", "field": "status", "line": None}]
    }


@pytest.mark.parametrize("user", ["alice", "carol"])
def test_the_api_answers_404_to_non_admins(client, request, bearer, user, sizes):
    headers = bearer(request.getfixturevalue(user))
    for response in (
        client.get(API, **headers),
        client.post(f"{API}/humanize/approve", {}, content_type="application/json", **headers),
        client.post(f"{API}/humanize/reject", {"reason": "x"}, content_type="application/json", **headers),
    ):
        assert response.status_code == 404
        assert response.json() == {"errors": [{"message": "Not found.", "field": None, "line": None}]}
    assert Package.objects.get(name="humanize").status == Approval.PENDING


def test_the_api_answers_401_without_credentials(client, sizes):
    for response in (
        client.get(API),
        client.post(f"{API}/humanize/approve", {}, content_type="application/json"),
        client.get(API, HTTP_AUTHORIZATION="Bearer not-a-token"),
    ):
        assert response.status_code == 401
        assert list(response.json()) == ["errors"]
    assert Package.objects.get(name="humanize").status == Approval.PENDING


def test_the_api_list_makes_a_fixed_number_of_queries(client, admin, alice, bearer, upload):
    headers = bearer(admin)
    _waiting_toolkits(upload, alice, 2)
    # The first call with a token records when it was used; later calls in the same minute
    # do not, so measure from the second call on.
    client.get(API, **headers)
    with CaptureQueriesContext(connection) as few:
        assert client.get(API, **headers).status_code == 200
    _waiting_toolkits(upload, alice, 10, start=2)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get(API, **headers).json()["items"]) > 12
    assert len(many) == len(few)


def test_the_bulk_and_the_row_approve_buttons_have_distinct_names(client, admin, sizes):
    client.force_login(admin)
    html = client.get(QUEUE).content.decode()
    assert 'aria-label="Approve the selected packages">Approve</button>' in html
    assert 'aria-label="Approve humanize">Approve</button>' in html
