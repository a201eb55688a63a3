"""Taking toolkits out and starting new ones: a revision's `.py`, one toolkit or a selection as
Open WebUI's export JSON (read back by the existing import), a clone, the starter template and
the editor's snippets. The browser walk (template → ready → run, export → import, clone) is in
tests/browser/test_take_out.py.

The people: alice and bob are authors; carol may not upload; admin may do anything."""

from __future__ import annotations

import json

import pytest

from tests.conftest import toolkit_source
from toolhub.toolkits import access, starter
from toolhub.toolkits.bulk import LOADED, import_export
from toolhub.toolkits.models import Toolkit, Use
from toolhub.toolkits.services import revision_upload, toolkit_delete
from toolhub.toolkits.source_checks import parse_toolkit_source

pytestmark = pytest.mark.django_db


@pytest.fixture
def echo(alice, upload):
    toolkit = upload(alice, toolkit_source("Echo"), slug="echo")
    revision_upload(toolkit=toolkit, source=toolkit_source("Echo", version="0.2.0"), user=alice)
    return toolkit


def test_any_revision_downloads_as_the_file_uploaded(client, echo, carol):
    client.force_login(carol)
    first = client.get("/toolkits/echo/revisions/1/download/")
    assert first.status_code == 200
    assert first["Content-Disposition"] == 'attachment; filename="echo-r1.py"'
    assert first["Content-Type"] == "text/x-python; charset=utf-8"
    assert first.content.decode() == toolkit_source("Echo")
    assert client.get("/toolkits/echo/revisions/2/download/").content.decode() == toolkit_source("Echo", version="0.2.0")
    assert client.get("/toolkits/echo/revisions/3/download/").status_code == 404
    assert client.post("/toolkits/echo/revisions/1/download/").status_code == 405


def test_a_toolkit_someone_may_not_see_does_not_download_or_export(client, echo, alice, bob, carol):
    access.toolkit_set_access(toolkit=echo, use=Use.GROUPS, groups=[], users=["bob"], by=alice)
    client.force_login(carol)
    assert client.get("/toolkits/echo/revisions/1/download/").status_code == 404
    assert client.get("/toolkits/echo/export/").status_code == 404
    assert client.get("/toolkits/export/?slug=echo").status_code == 404
    client.logout()
    assert client.get("/toolkits/echo/revisions/1/download/").status_code == 302
    assert client.get("/toolkits/export/?slug=echo").status_code == 302


def test_an_export_round_trips_through_the_open_webui_import(client, echo, alice, admin, upload):
    upload(alice, toolkit_source("Clock"), slug="clock")
    client.force_login(alice)
    response = client.get("/toolkits/export/?slug=echo&slug=clock&slug=echo")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="toolhub-export.json"'
    entries = json.loads(response.content)
    assert [e["id"] for e in entries] == ["clock", "echo"]
    # The toolkit's current revision, with Open WebUI's fields.
    assert entries[1]["content"] == Toolkit.objects.get(slug="echo").current_revision.source
    assert set(entries[1]) >= {"id", "name", "content", "specs", "meta", "created_at", "updated_at"}
    before = {e["id"]: e["content"] for e in entries}

    for slug in ("echo", "clock"):
        toolkit_delete(toolkit=Toolkit.objects.get(slug=slug))
    imported, verdicts = import_export(response.content, user=admin)
    assert imported and [v.outcome for v in verdicts] == [LOADED, LOADED]
    after = {t.slug: t.latest_revision().source for t in Toolkit.objects.all()}
    assert after == before


def test_one_toolkit_exports_as_a_list_of_one(client, echo, carol):
    client.force_login(carol)
    response = client.get("/toolkits/echo/export/")
    assert response["Content-Disposition"] == 'attachment; filename="echo-export.json"'
    [entry] = json.loads(response.content)
    assert entry["id"] == "echo" and entry["name"] == "Echo"
    assert client.post("/toolkits/echo/export/").status_code == 405


def test_a_selection_is_bounded_and_an_empty_one_says_so(client, carol):
    client.force_login(carol)
    assert client.get("/toolkits/export/").status_code == 302
    too_many = "&".join(f"slug=t{i}" for i in range(201))
    assert client.get(f"/toolkits/export/?{too_many}").status_code == 400


def test_export_is_a_reserved_slug(client, alice):
    client.force_login(alice)
    response = client.post("/toolkits/new/", {"slug": "export", "source": toolkit_source("Export")})
    assert "reserved for a page of ToolHub" in response.content.decode()
    assert not Toolkit.objects.filter(slug="export").exists()


def test_an_author_clones_their_own_toolkit_as_their_own_code(client, echo, alice):
    client.force_login(alice)
    response = client.post("/toolkits/echo/clone/", {"slug": "echo_copy", "revision": "1"})
    assert response.status_code == 302 and response["Location"] == "/toolkits/echo_copy/"
    copy = Toolkit.objects.get(slug="echo_copy")
    revision = copy.latest_revision()
    assert copy.owner == alice and revision.source == toolkit_source("Echo") and not revision.imported
    assert copy.use == Use.EVERYONE and not copy.egress_granted


def test_a_clone_of_someone_elses_code_is_stored_as_imported(client, echo, bob):
    client.force_login(bob)
    client.post("/toolkits/echo/clone/", {"slug": "bobs_echo"})
    copy = Toolkit.objects.get(slug="bobs_echo")
    # Without a revision named, the current one.
    assert copy.owner == bob and copy.latest_revision().imported
    assert copy.latest_revision().source == Toolkit.objects.get(slug="echo").current_revision.source


def test_a_clone_is_refused_to_who_may_not_upload_and_on_a_taken_slug(client, echo, carol, alice):
    client.force_login(carol)
    assert client.post("/toolkits/echo/clone/", {"slug": "mine"}).status_code == 403
    assert client.get("/toolkits/echo/clone/").status_code == 405
    client.force_login(alice)
    response = client.post("/toolkits/echo/clone/", {"slug": "echo"}, follow=True)
    assert "exists already" in response.content.decode()
    response = client.post("/toolkits/echo/clone/", {"slug": "Not a slug!"}, follow=True)
    assert "is not valid" in response.content.decode()
    assert client.post("/toolkits/echo/clone/", {"slug": "x", "revision": "9"}).status_code == 404
    assert Toolkit.objects.count() == 1


def test_the_source_tab_offers_download_export_and_clone(client, echo, alice, carol):
    client.force_login(alice)
    page = client.get("/toolkits/echo/source/?revision=2").content.decode()
    assert 'href="/toolkits/echo/revisions/2/download/"' in page and 'href="/toolkits/echo/export/"' in page
    assert 'action="/toolkits/echo/clone/"' in page and 'value="echo_copy"' in page
    client.force_login(carol)
    page = client.get("/toolkits/echo/source/?revision=1").content.decode()
    assert 'href="/toolkits/echo/revisions/1/download/"' in page and "/clone/" not in page


def test_the_list_offers_the_export_of_ticked_toolkits(client, echo, carol):
    client.force_login(carol)
    page = client.get("/toolkits/").content.decode()
    assert 'action="/toolkits/export/"' in page and 'name="slug" value="echo"' in page


def test_the_starter_template_is_a_valid_toolkit_with_every_part():
    parsed = parse_toolkit_source(starter.STARTER, filename="my_toolkit.py")
    assert parsed.tool_names == ["greet"] and parsed.has_valves and parsed.has_user_valves
    assert '"type": "status"' in starter.STARTER and '"type": "citation"' in starter.STARTER


def test_the_editor_offers_the_template_and_the_snippets(client, alice, echo):
    client.force_login(alice)
    blank = client.get("/toolkits/new/").content.decode()
    assert 'href="?template=starter"' in blank and "title: My toolkit" not in blank
    page = client.get("/toolkits/new/?template=starter").content.decode()
    assert "title: My toolkit" in page and "class UserValves(BaseModel)" in page
    for key, _label, _code in starter.SNIPPETS:
        assert f'id="snippet-{key}"' in page
    assert 'href="/guides/toolkit-format/"' in page
    edit = client.get("/toolkits/echo/edit/").content.decode()
    assert 'id="snippet-confirmation"' in edit


def test_the_toolkit_format_guide_is_served(client, carol):
    client.force_login(carol)
    page = client.get("/guides/toolkit-format/").content.decode()
    assert "<h1>The toolkit format</h1>" in page and "class UserValves(BaseModel):" in page
