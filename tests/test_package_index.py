"""Informed approvals: the approval queue shows what the configured index
says about each name, read from a real local PEP 691 index (tests/index_fixtures.py), and a
name the index does not know cannot be approved by accident."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.conftest import toolkit_source
from tests.helpers import broker_at
from tests.live_fixtures import free_port
from toolhub.packages import index_checks
from toolhub.packages.index_client import lookup
from toolhub.packages.models import Approval, IndexState, Package
from toolhub.packages.tasks import check_package_index
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

QUEUE = "/packages/"
DECIDE = "/packages/decide/"
PY311 = (3, 11)


def _lookup(index, name, **kwargs):
    return lookup(name, indexes=[index.url], python=PY311, **{"timeout": 5.0, **kwargs})


# THE INDEX CLIENT
# ------------------------------------------------------------------------------------------


def test_it_reads_the_latest_release_its_date_and_its_metadata(local_index):
    info = _lookup(local_index, "Humanize")
    assert info.state == "found"
    # 4.10.0 is yanked and 5.0.0rc1 a pre-release: the latest release is 4.9.0, released
    # when its first file was uploaded.
    assert (info.version, info.released) == ("4.9.0", "2023-11-02T09:29:00.000000Z")
    assert (info.summary, info.license, info.wheel) == ("Python humanize utilities", "MIT", True)
    # colorama applies; tzdata only below Python 3.9, pytest only with the `tests` extra.
    assert (info.dependencies, info.requires) == (1, ("colorama",))
    assert info.index == local_index.url


def test_an_sdist_only_project_without_metadata(local_index):
    info = _lookup(local_index, "foo_bar")
    assert (info.state, info.version, info.wheel, info.dependencies) == ("found", "1.2.0", False, None)
    assert (info.summary, info.license) == ("", "")


def test_wheels_count_only_for_the_target_python(local_index):
    local_index.project("native", [{"filename": "native-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"}])
    local_index.project("stable-abi", [{"filename": "stable_abi-1.0-cp38-abi3-manylinux_2_17_x86_64.whl"}])
    assert _lookup(local_index, "native").wheel is False
    assert _lookup(local_index, "stable-abi").wheel is True


def test_licences_from_classifiers_or_the_first_line_of_the_licence_field(local_index):
    metadata = {
        "classic-1.0-py3-none-any.whl": "Metadata-Version: 2.1\nName: classic\nVersion: 1.0\n"
        "Classifier: License :: OSI Approved :: BSD License\n",
        "wordy-1.0-py3-none-any.whl": "Metadata-Version: 2.1\nName: wordy\nVersion: 1.0\n"
        "License: Apache License\n        Version 2.0, January 2004\n",
    }
    local_index.project("classic", [{"filename": "classic-1.0-py3-none-any.whl"}], metadata=metadata)
    local_index.project("wordy", [{"filename": "wordy-1.0-py3-none-any.whl"}], metadata=metadata)
    assert _lookup(local_index, "classic").license == "BSD License"
    assert _lookup(local_index, "wordy").license == "Apache License"
    assert _lookup(local_index, "classic").dependencies == 0


def test_a_name_no_index_knows_is_missing_and_an_extra_index_is_asked_too(local_index, tmp_path):
    assert _lookup(local_index, "no-such-package").state == "missing"
    # A second index that knows the name (the first answers 404).
    other = lookup("humanize", indexes=[local_index.url + "nowhere/", local_index.url], python=PY311, timeout=5)
    assert (other.state, other.version) == ("found", "4.9.0")


@pytest.mark.parametrize(("name", "body", "content_type", "error"), [
    ("plain-text", b"humanize 4.9.0", "text/plain", "not_json"),
    ("garbage", b"{not json", "application/vnd.pypi.simple.v1+json", "unreadable"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "application/vnd.pypi.simple.v1+json", "unreadable"),
    ("wrong-shape", json.dumps({"files": {"a": 1}}).encode(), "application/vnd.pypi.simple.v1+json", "unreadable"),
])
def test_a_hostile_or_foreign_answer_is_an_error_not_an_exception(local_index, name, body, content_type, error):
    local_index.raw(name, body, content_type=content_type)
    info = _lookup(local_index, name)
    assert (info.state, info.error) == ("error", error)


HTML_PAGE = """<!DOCTYPE html><html><body>
<a href="../../files/older-1.0-py3-none-any.whl#sha256=00">older-1.0-py3-none-any.whl</a>
<a href="../../files/older-1.1-py3-none-any.whl" data-core-metadata="sha256={digest}">older-1.1-py3-none-any.whl</a>
<a href="../../files/older-1.2-py3-none-any.whl" data-yanked="">older-1.2-py3-none-any.whl</a>
<a href="/etc/hosts" data-dist-info-metadata="true">older-0.1-py3-none-any.whl</a>
</body></html>"""
OLDER_METADATA = "Metadata-Version: 2.1\nName: older\nVersion: 1.1\nSummary: From an HTML index\nRequires-Dist: six\n"


def _html_index(root, local_index=None):
    """A PEP 503 (HTML) project page and its metadata file, under `root`."""
    import hashlib

    (root / "files").mkdir(parents=True, exist_ok=True)
    (root / "files" / "older-1.1-py3-none-any.whl.metadata").write_text(OLDER_METADATA)
    page = HTML_PAGE.format(digest=hashlib.sha256(OLDER_METADATA.encode()).hexdigest()).encode()
    if local_index is not None:
        local_index.raw("older", page, content_type="text/html")
    else:
        (root / "simple" / "older").mkdir(parents=True)
        (root / "simple" / "older" / "index.html").write_bytes(page)


def test_an_index_that_answers_html_is_read_as_pip_reads_it(local_index):
    _html_index(local_index.root, local_index)
    info = _lookup(local_index, "older")
    # 1.2 is yanked; the page has no upload times, the metadata file the rest.
    assert (info.state, info.version, info.released) == ("found", "1.1", "")
    assert (info.summary, info.requires, info.wheel) == ("From an HTML index", ("six",), True)


def test_a_file_index_is_read_from_its_directory_only(tmp_path):
    _html_index(tmp_path / "mirror")
    url = (tmp_path / "mirror" / "simple").as_uri() + "/"
    info = lookup("older", indexes=[url], python=PY311)
    assert (info.state, info.version, info.summary) == ("found", "1.1", "From an HTML index")
    assert lookup("absent", indexes=[url], python=PY311).state == "missing"
    # A page that links outside the mirror's folder gets nothing read from there.
    page = tmp_path / "mirror" / "simple" / "older" / "index.html"
    page.write_text('<a href="/etc/hosts" data-core-metadata="true">older-2.0-py3-none-any.whl</a>')
    assert lookup("older", indexes=[url], python=PY311).dependencies is None


def test_odd_file_entries_are_skipped(local_index):
    local_index.raw("odd", json.dumps({"files": [
        "text", {"filename": 3, "url": "x"}, {"filename": "other-1.0-py3-none-any.whl", "url": "x"},
        {"filename": "odd-1.0.exe", "url": "x"}, {"filename": "odd-9-py3-none-any.whl", "url": "javascript:x",
                                                  "core-metadata": True},
    ]}).encode())
    info = _lookup(local_index, "odd")
    # The one file of the project: metadata from a javascript: URL is never fetched.
    assert (info.state, info.version, info.dependencies) == ("found", "9", None)


def test_slow_huge_broken_and_absent_indexes(local_index):
    assert _lookup(local_index, "slow", timeout=0.5).error == "timeout"
    assert _lookup(local_index, "huge").error == "too_large"
    broken = _lookup(local_index, "broken")
    assert (broken.error, broken.error_detail) == ("status", "500")
    closed = lookup("humanize", indexes=[f"http://127.0.0.1:{free_port()}/simple/"], python=PY311, timeout=2)
    assert (closed.state, closed.error, closed.error_detail) == ("error", "unreachable", "127.0.0.1")


def test_metadata_that_does_not_match_its_hash_is_not_used(local_index):
    local_index.project("tampered", [{"filename": "tampered-1.0-py3-none-any.whl"}],
                        metadata={"tampered-1.0-py3-none-any.whl": "Name: tampered\nSummary: real\n"})
    (local_index.root / "files" / "tampered-1.0-py3-none-any.whl.metadata").write_text("Summary: swapped\n")
    info = _lookup(local_index, "tampered")
    assert (info.state, info.summary, info.dependencies) == ("found", "", None)


def test_credentials_in_the_index_url_are_sent_to_it_and_never_shown(local_index):
    url = local_index.url.replace("http://", "http://reader:s3cret@")
    info = lookup("humanize", indexes=[url], python=PY311, timeout=5)
    assert info.state == "found" and info.dependencies == 1
    assert "s3cret" not in json.dumps(info.as_dict())
    assert local_index.seen_auth["/simple/humanize/"].startswith("Basic ")
    missing = lookup("no-such", indexes=[url], python=PY311, timeout=5)
    assert "s3cret" not in json.dumps(missing.as_dict())


# THE QUEUE
# ------------------------------------------------------------------------------------------


@pytest.fixture
def waiting(alice, bob, upload, local_index, django_capture_on_commit_callbacks):
    """alice's toolkit asks for humanize and a name the index does not know; bob's for foo-bar.
    The lookups an upload queues are captured, not sent."""
    with django_capture_on_commit_callbacks():
        upload(alice, toolkit_source("Sizes", "humanize>=4, humanise-typo"), slug="sizes")
        upload(bob, toolkit_source("Bars", "Foo_Bar"), slug="bars")
    return local_index


def _check_all() -> None:
    for name in Package.objects.values_list("name", flat=True):
        check_package_index.run(name)


def test_an_upload_queues_a_lookup_of_each_name(alice, upload, local_index, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        upload(alice, toolkit_source("Sizes", "humanize>=4, Foo_Bar"), slug="sizes")
    assert set(Package.objects.values_list("name", "index_state")) == {
        ("humanize", IndexState.CHECKING), ("foo-bar", IndexState.CHECKING)
    }
    # One send for both names (the revision waits for approval, so no build is queued).
    assert len(callbacks) == 1


def test_with_the_broker_down_an_upload_still_lands_and_its_names_go_back_to_unchecked(
    alice, upload, local_index, django_capture_on_commit_callbacks
):
    """Checks are sent like every other task (toolhub.broker.send): a broker that is down is
    noticed within a second, the upload is kept, and its names are asked for again later."""
    started = time.monotonic()
    with broker_at("redis://127.0.0.1:1/0"), django_capture_on_commit_callbacks(execute=True):
        toolkit = upload(alice, toolkit_source("Sizes", "humanize>=4, Foo_Bar"), slug="sizes")
    assert time.monotonic() - started < 5
    assert toolkit.latest_revision().status == Status.AWAITING_APPROVAL
    assert set(Package.objects.values_list("name", "index_state")) == {
        ("humanize", IndexState.UNCHECKED), ("foo-bar", IndexState.UNCHECKED)
    }


def test_the_queue_shows_what_the_index_says(client, admin, waiting):
    _check_all()
    client.force_login(admin)
    html = client.get(QUEUE).content.decode()
    humanize = html.split('data-package="humanize"')[1].split("</tr>")[0]
    for text in ("4.9.0", "2023-11-02", "Python humanize utilities", "Licence: MIT", "wheel for Python 3.11", "1 dependency: <code>colorama</code>"):
        assert text in humanize
    foo = html.split('data-package="foo-bar"')[1].split("</tr>")[0]
    assert "no wheel for Python 3.11: it builds only if an admin allows building it from source" in foo
    assert "dependencies unknown" in foo
    typo = html.split('data-package="humanise-typo"')[1].split("</tr>")[0]
    assert "Not on the index" in typo
    assert f"{waiting.url} does not know this name" in typo
    assert "Approve humanise-typo anyway" in typo
    # Its Approve button waits for that box (static/js/toolhub.js); the others' do not.
    assert 'data-enabled-by="anyway-humanise-typo"' in typo and "data-enabled-by" not in humanize
    # Nothing is looked up again while the answers are fresh, and no cell polls.
    assert "hx-get" not in html.split("<tbody>")[1].split("</tbody>")[0]


def test_the_queue_page_never_waits_for_the_index(client, admin, alice, upload, local_index, settings, django_capture_on_commit_callbacks):
    settings.TOOLHUB_INDEX_CHECK_TIMEOUT = 0.5
    upload(alice, toolkit_source("Slow", "slow"), slug="slow_tk")
    Package.objects.update(index_state=IndexState.UNCHECKED)
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        html = client.get(QUEUE).content.decode()
    # The lookup is queued (sent once the page's work commits), the cell polls meanwhile.
    assert len(callbacks) == 1
    assert Package.objects.get(name="slow").index_state == IndexState.CHECKING
    assert 'hx-get="/packages/slow/index/"' in html
    assert "Checking the index…" in html
    # The polled cell, once a worker has answered, stops polling.
    check_package_index.run("slow")
    cell = client.get("/packages/slow/index/").content.decode()
    assert 'data-index-state="error"' in cell and "did not answer in time" in cell
    assert "hx-get" not in cell


def test_a_check_no_worker_answered_stops_polling_and_is_asked_again(client, admin, waiting, django_capture_on_commit_callbacks):
    Package.objects.update(index_state=IndexState.CHECKING, index_requested_at=timezone.now() - timedelta(minutes=5))
    client.force_login(admin)
    cell = client.get("/packages/humanize/index/").content.decode()
    assert "Not checked yet." in cell and "hx-get" not in cell
    with django_capture_on_commit_callbacks() as callbacks:
        client.get(QUEUE)
    assert len(callbacks) == 1
    assert set(Package.objects.values_list("index_state", flat=True)) == {IndexState.CHECKING}


def test_with_no_index_nothing_is_looked_up(client, admin, alice, upload, settings, django_capture_on_commit_callbacks):
    settings.TOOLHUB_NO_INDEX = True
    with django_capture_on_commit_callbacks():
        upload(alice, toolkit_source("Sizes", "humanize"), slug="sizes")
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as callbacks:
        html = client.get(QUEUE).content.decode()
    assert callbacks == []
    assert "Not looked up: builds use no index" in html
    assert Package.objects.get().index_state == IndexState.UNCHECKED


def test_the_queue_with_index_information_makes_a_fixed_number_of_queries(client, admin, alice, bob, upload, local_index, django_capture_on_commit_callbacks):
    def queries() -> int:
        _check_all()
        with CaptureQueriesContext(connection) as captured:
            assert client.get(QUEUE).status_code == 200
        return len(captured)

    client.force_login(admin)
    with django_capture_on_commit_callbacks():
        for i in range(2):
            upload(alice, toolkit_source(f"Few {i}", f"pkg-{i}, humanize"), slug=f"few_{i}")
    few = queries()
    with django_capture_on_commit_callbacks():
        for i in range(2, 14):
            upload(bob, toolkit_source(f"Many {i}", f"pkg-{i}, humanize, foo-bar"), slug=f"many_{i}")
    assert queries() == few
    assert few <= 9


# APPROVING A NAME THE INDEX DOES NOT KNOW
# ------------------------------------------------------------------------------------------


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_approving_an_unknown_name_is_refused_unless_confirmed(client, admin, waiting):
    _check_all()
    client.force_login(admin)
    response = client.post(DECIDE, {"name": "humanise-typo", "action": "approve"}, follow=True)
    assert _messages(response) == [
        "humanise-typo is not on the package index; confirm that you approve it anyway to approve it."
    ]
    assert Package.objects.get(name="humanise-typo").status == Approval.PENDING
    # In a bulk approval too, and then nothing is approved (all or nothing).
    response = client.post(DECIDE, {"name": ["humanize", "humanise-typo"], "action": "approve"}, follow=True)
    assert "humanise-typo is not on the package index" in _messages(response)[0]
    assert set(Package.objects.values_list("status", flat=True)) == {Approval.PENDING}
    # Ticking "approve anyway" for that name approves it.
    response = client.post(
        DECIDE, {"name": "humanise-typo", "action": "approve", "approve_unknown": "humanise-typo"}, follow=True
    )
    assert _messages(response) == ["Approved: humanise-typo"]
    assert Package.objects.get(name="humanise-typo").status == Approval.APPROVED


def test_approving_before_the_index_check_answered_says_so_and_asks_again(
    client, admin, bearer, waiting, django_capture_on_commit_callbacks
):
    # The upload queued the checks (captured, never sent): no worker has answered yet.
    assert Package.objects.get(name="humanise-typo").index_state == IndexState.CHECKING
    client.force_login(admin)
    html = client.get(QUEUE).content.decode()
    assert "Approve humanise-typo without waiting for the index check" in html
    response = client.post(DECIDE, {"name": ["humanize", "humanise-typo"], "action": "approve"}, follow=True)
    assert _messages(response) == [
        "The package index has not answered about humanise-typo, humanize yet; approve again in a moment, or"
        " confirm that you approve them without waiting."
    ]
    assert set(Package.objects.values_list("status", flat=True)) == {Approval.PENDING}
    response = client.post(
        "/api/v1/packages/humanise-typo/approve", {}, content_type="application/json", **bearer(admin)
    )
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "name"
    assert "has not answered about humanise-typo yet" in response.json()["errors"][0]["message"]
    # A check no worker took is asked for again by the refused approval.
    Package.objects.filter(name="humanize").update(index_state=IndexState.UNCHECKED)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(DECIDE, {"name": "humanize", "action": "approve"}, follow=True)
    assert "has not answered about humanize yet" in _messages(response)[0]
    assert len(callbacks) == 1 and Package.objects.get(name="humanize").index_state == IndexState.CHECKING
    # Once the index answered, the unknown name gets its own warning, and a known one is approved.
    _check_all()
    response = client.post(DECIDE, {"name": "humanise-typo", "action": "approve"}, follow=True)
    assert "humanise-typo is not on the package index" in _messages(response)[0]
    response = client.post(DECIDE, {"name": "humanize", "action": "approve"}, follow=True)
    assert _messages(response) == ["Approved: humanize"]


def test_an_admin_may_approve_without_waiting_for_the_index_check(client, admin, waiting):
    client.force_login(admin)
    response = client.post(DECIDE, {"name": "foo-bar", "action": "approve", "approve_unknown": "foo-bar"}, follow=True)
    assert _messages(response) == ["Approved: foo-bar"]
    assert Package.objects.get(name="foo-bar").status == Approval.APPROVED


def test_rejecting_an_unknown_name_needs_no_confirmation(client, admin, waiting):
    _check_all()
    client.force_login(admin)
    client.post(DECIDE, {"name": "humanise-typo", "action": "reject", "reason": "A typo: humanize."})
    assert Package.objects.get(name="humanise-typo").status == Approval.REJECTED


def test_a_row_approves_its_own_package_only(client, admin, alice, waiting, django_capture_on_commit_callbacks):
    _check_all()
    client.force_login(admin)
    html = client.get(QUEUE).content.decode()
    assert 'form="row-humanize" name="action" value="approve"' in html
    assert '<form method="post" action="/packages/decide/" id="row-humanize" hidden>' in html
    client.post(DECIDE, {"name": "humanize", "status": "pending", "action": "approve"})
    assert dict(Package.objects.values_list("name", "status")) == {
        "humanize": Approval.APPROVED, "humanise-typo": Approval.PENDING, "foo-bar": Approval.PENDING,
    }


def test_the_api_refuses_an_unknown_name_unless_confirmed(client, admin, bearer, waiting):
    _check_all()
    headers = bearer(admin)
    url = "/api/v1/packages/humanise-typo/approve"
    response = client.post(url, {}, content_type="application/json", **headers)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "name"
    assert "not on the package index" in response.json()["errors"][0]["message"]
    response = client.post(url, {"approve_unknown": True}, content_type="application/json", **headers)
    assert response.status_code == 200 and response.json()["status"] == "approved"


def test_the_api_lists_what_the_index_says(client, admin, bearer, waiting):
    _check_all()
    items = {p["name"]: p["index"] for p in client.get("/api/v1/packages", **bearer(admin)).json()["items"]}
    humanize = items["humanize"]
    assert (humanize["state"], humanize["version"], humanize["released"]) == ("found", "4.9.0", "2023-11-02T09:29:00.000000Z")
    assert (humanize["license"], humanize["wheel"], humanize["dependencies"], humanize["requires"]) == ("MIT", True, 1, ["colorama"])
    assert humanize["checked_at"] and humanize["index"] == waiting.url
    assert items["humanise-typo"]["state"] == "missing"
    assert (items["foo-bar"]["wheel"], items["foo-bar"]["dependencies"]) == (False, None)


def test_an_unknown_name_confirmed_lets_the_revision_build(client, admin, alice, upload, local_index, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        toolkit = upload(alice, toolkit_source("Typo", "humanise-typo"), slug="typo")
    _check_all()
    client.force_login(admin)
    with django_capture_on_commit_callbacks():
        client.post(DECIDE, {"name": "humanise-typo", "action": "approve", "approve_unknown": "humanise-typo"})
    assert toolkit.latest_revision().status == Status.BUILDING


# THE POLLED CELL AND THE MENU
# ------------------------------------------------------------------------------------------


def test_the_cell_is_for_admins_only(client, alice, carol, admin, waiting):
    cell = "/packages/humanize/index/"
    assert client.get(cell).status_code == 302
    for user in (alice, carol):
        client.force_login(user)
        assert client.get(cell).status_code == 404
    client.force_login(admin)
    assert client.get(cell).status_code == 200
    assert client.post(cell).status_code == 405
    assert client.get("/packages/no-such/index/").status_code == 404


def test_admins_see_how_many_packages_wait_in_the_menu(client, admin, alice, waiting):
    client.force_login(admin)
    html = client.get("/toolkits/").content.decode()
    assert '<span class="count-badge" id="pending-packages">3<span class="visually-hidden"> packages wait for approval' in html
    client.post(DECIDE, {"name": ["humanize", "foo-bar"], "action": "reject", "reason": "no"})
    assert 'id="pending-packages">1<span class="visually-hidden"> package waits for approval' in client.get("/toolkits/").content.decode()
    client.force_login(alice)
    assert "pending-packages" not in client.get("/toolkits/").content.decode()


def test_stale_information_is_looked_up_again(waiting, settings):
    _check_all()
    package = Package.objects.get(name="humanize")
    assert not index_checks.is_stale(package)
    Package.objects.update(index_checked_at=timezone.now() - timedelta(seconds=settings.TOOLHUB_INDEX_CHECK_MAX_AGE + 1))
    assert index_checks.is_stale(Package.objects.get(name="humanize"))
