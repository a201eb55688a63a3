"""Bulk import: `manage.py import_toolkits PATH` (a folder, file by file) and the JSON that
Open WebUI's Tools workspace exports (page and API, all entries or none).

People (see conftest): admin is staff, alice is a toolkit author, carol a plain user.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from toolhub.accounts.models import ApiToken
from toolhub.toolkits.bulk import MAX_EXPORT_ENTRIES, import_export
from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

SCRAPE = '''"""
title: Web Scrape
requirements: requests
"""


class Tools:
    def fetch(self, url: str) -> str:
        """Fetch a page."""
        return url

    def links(self, url: str) -> list[str]:
        """List its links."""
        return [url]

    def title(self, url: str) -> str:
        """Its title."""
        return url
'''

CLOCK = '''"""
title: Clock
"""


class Tools:
    def now(self) -> str:
        """The time."""
        return "12:00"
'''

BROKEN = "class Tools:\n    def now(self):\n        return (\n"


def _command(*args: str) -> tuple[str, str, CommandError | None]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_toolkits", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), exc
    return out.getvalue(), err.getvalue(), None


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "web_scrape.py").write_text(SCRAPE)
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "clock.py").write_text(CLOCK)
    (tmp_path / "more" / "broken.py").write_text(BROKEN)
    (tmp_path / "more" / "notes.txt").write_text("not python")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.py").write_text(CLOCK)
    return tmp_path


def test_the_command_imports_every_file_below_the_folder(admin, folder):
    out, err, exc = _command(str(folder))
    assert out.splitlines() == [
        "Loaded toolkit clock revision 1 (1 tools)",
        "Loaded toolkit web_scrape revision 1 (3 tools)",
        "2 loaded, 0 unchanged, 1 refused",
    ]
    assert err.splitlines() == ["Refused more/broken.py: line 3: Syntax error at line 3, column 16: '(' was never closed."]
    assert str(exc) == "1 file(s) refused"
    assert sorted(Toolkit.objects.values_list("slug", flat=True)) == ["clock", "web_scrape"]
    assert Toolkit.objects.get(slug="web_scrape").owner == admin


def test_the_command_is_safe_to_rerun_and_adds_changed_files_as_revisions(admin, folder):
    _command(str(folder))
    (folder / "more" / "broken.py").unlink()
    (folder / "more" / "clock.py").write_text(CLOCK.replace("12:00", "13:00"))
    out, err, exc = _command(str(folder))
    assert out.splitlines() == [
        "Loaded toolkit clock revision 2 (1 tools)",
        "Unchanged toolkit web_scrape revision 1 (3 tools)",
        "1 loaded, 1 unchanged, 0 refused",
    ]
    assert exc is None and err == ""
    assert Revision.objects.count() == 3


def test_files_with_the_same_name_in_two_folders_get_two_toolkits(admin, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "clock.py").write_text(CLOCK)
    (tmp_path / "b" / "clock.py").write_text(CLOCK.replace("12:00", "1:00"))
    out, _err, exc = _command(str(tmp_path), "--owner", "admin")
    assert exc is None
    assert out.splitlines()[:2] == ["Loaded toolkit clock revision 1 (1 tools)", "Loaded toolkit b_clock revision 1 (1 tools)"]


def test_the_command_needs_an_owner(tmp_path):
    assert "Create an admin first" in str(_command(str(tmp_path))[2])
    assert "There is no user 'nobody'" in str(_command(str(tmp_path), "--owner", "nobody")[2])
    assert "does not exist" in str(_command(str(tmp_path / "missing"))[2])


# -- The Open WebUI export ---------------------------------------------------------------------


def _entry(tool_id: str, content: str, name: str = "") -> dict:
    """One tool as Open WebUI's export writes it."""
    return {
        "id": tool_id,
        "user_id": "8d6b4c1e",
        "name": name or tool_id.replace("_", " ").title(),
        "content": content,
        "specs": [],
        "meta": {"description": "From Open WebUI", "manifest": {"title": name}},
        "access_control": None,
        "updated_at": 1733000000,
        "created_at": 1733000000,
        "user": {"id": "8d6b4c1e", "name": "Admin", "email": "admin@example.org", "role": "admin"},
    }


GOOD_EXPORT = [_entry("web_scrape", SCRAPE), _entry("clock", CLOCK)]
MIXED_EXPORT = [_entry("web_scrape", SCRAPE), _entry("broken_one", BROKEN), _entry("web_scrape", CLOCK)]


def test_an_export_becomes_toolkits_named_by_their_ids(admin):
    imported, verdicts = import_export(json.dumps(GOOD_EXPORT), user=admin)
    assert imported
    assert [v.log_line() for v in verdicts] == [
        "Loaded toolkit web_scrape revision 1 (3 tools)",
        "Loaded toolkit clock revision 1 (1 tools)",
    ]
    assert Toolkit.objects.get(slug="clock").current_revision.source == CLOCK
    # Importing the same export again adds nothing.
    imported, verdicts = import_export(json.dumps(GOOD_EXPORT), user=admin)
    assert imported and [v.outcome for v in verdicts] == ["unchanged", "unchanged"]
    assert Revision.objects.count() == 2


def test_a_broken_entry_or_a_duplicate_imports_nothing_and_says_why(admin):
    imported, verdicts = import_export(json.dumps(MIXED_EXPORT), user=admin)
    assert not imported
    assert [(v.name, v.outcome) for v in verdicts] == [
        ("web_scrape", "not_imported"),
        ("broken_one", "refused"),
        ("web_scrape", "refused"),
    ]
    assert verdicts[1].line == 3 and "was never closed" in verdicts[1].error
    assert verdicts[2].error == "The id 'web_scrape' is also entry 1; ids must be unique."
    assert Toolkit.objects.count() == 0 and Revision.objects.count() == 0


def test_an_id_taken_by_a_toolkit_the_importer_may_not_manage_is_refused(alice, bob, upload):
    upload(bob, CLOCK, slug="clock")
    imported, verdicts = import_export(json.dumps([_entry("clock", CLOCK.replace("12", "11"))]), user=alice)
    assert not imported
    assert verdicts[0].error == "A toolkit with the slug 'clock' exists already; choose another slug, such as 'clock_2'."


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("not json", "The export is not JSON"),
        ('{"a": [1]', "The export is not JSON"),
        ("[1, 2]", "An Open WebUI export is a JSON list of tools"),
        ("[]", "The export has no tools."),
        (json.dumps([_entry("x", CLOCK)] * (MAX_EXPORT_ENTRIES + 1)), f"at most {MAX_EXPORT_ENTRIES} are imported"),
        ("[" * 100_000 + "]" * 100_000, "The export is not JSON"),
    ],
)
def test_what_is_not_an_export_is_refused_whole(admin, body, why):
    from toolhub.toolkits.bulk import ExportInvalid

    with pytest.raises(ExportInvalid, match=why):
        import_export(body, user=admin)
    assert Toolkit.objects.count() == 0


def test_entries_without_id_or_content_or_with_a_bad_id_are_refused(admin):
    entries = [{"id": "", "content": CLOCK}, {"id": "ok", "content": " "}, _entry("Not A Slug!", CLOCK)]
    imported, verdicts = import_export(json.dumps(entries), user=admin)
    assert not imported
    assert [v.error.split(";")[0].split(":")[0] for v in verdicts] == [
        "The entry has no `id`.",
        "The entry has no `content` (the toolkit's source).",
        "The slug 'Not A Slug!' is not valid",
    ]


# -- The page ------------------------------------------------------------------------------------

IMPORT = reverse("toolkit_import")


def _export_file(entries) -> SimpleUploadedFile:
    return SimpleUploadedFile("tool-export.json", json.dumps(entries).encode(), content_type="application/json")


def test_the_page_imports_an_export_and_shows_a_verdict_per_entry(client, admin):
    client.force_login(admin)
    assert 'type="file"' in client.get(IMPORT).content.decode()
    body = client.post(IMPORT, {"file": _export_file(GOOD_EXPORT)}).content.decode()
    assert "Imported 2 toolkits." in body
    assert body.count('class="verdict verdict-loaded"') == 2
    assert f'href="{reverse("toolkit_detail", args=["web_scrape"])}"' in body
    assert Toolkit.objects.count() == 2


def test_the_page_shows_why_nothing_was_imported(client, admin):
    client.force_login(admin)
    body = client.post(IMPORT, {"file": _export_file(MIXED_EXPORT)}).content.decode()
    assert "Nothing was imported: 2 of 3 entries were refused." in body
    assert "ids must be unique" in body and "was never closed" in body
    assert Toolkit.objects.count() == 0


def test_the_page_refuses_what_is_not_an_export(client, admin):
    client.force_login(admin)
    upload = SimpleUploadedFile("x.json", b"not json", content_type="application/json")
    body = client.post(IMPORT, {"file": upload}).content.decode()
    assert "The export is not JSON" in body
    body = client.post(IMPORT, {}).content.decode()
    assert "Choose the JSON file that Open WebUI exported." in body


def test_the_page_in_turkish(client, admin):
    client.force_login(admin)
    body = client.post(IMPORT, {"file": _export_file(GOOD_EXPORT)}, headers={"accept-language": "tr"})
    assert "2 araç takımı içe aktarıldı." in body.content.decode()


def test_the_page_is_for_admins_only(client, alice, carol):
    assert client.get(IMPORT).status_code == 302  # anonymous: to the login page
    for user in (alice, carol):
        client.force_login(user)
        assert client.get(IMPORT).status_code == 404
        assert client.post(IMPORT, {"file": _export_file(GOOD_EXPORT)}).status_code == 404
    assert Toolkit.objects.count() == 0


def test_the_page_refuses_other_methods(client, admin):
    client.force_login(admin)
    assert client.put(IMPORT).status_code == 405


# -- The API -------------------------------------------------------------------------------------


def _post(client, user, body: str):
    _token, raw = ApiToken.issue(user=user, name="tests")
    return client.post("/api/v1/imports/openwebui", data=body, content_type="application/json",
                       headers={"Authorization": f"Bearer {raw}"})


def test_the_api_imports_an_export(client, admin):
    response = _post(client, admin, json.dumps(GOOD_EXPORT))
    assert response.status_code == 200
    data = response.json()
    assert data["imported"] is True
    assert [(e["name"], e["outcome"], e["slug"], e["revision"], e["tools"]) for e in data["entries"]] == [
        ("web_scrape", "loaded", "web_scrape", 1, 3),
        ("clock", "loaded", "clock", 1, 1),
    ]


def test_the_api_answers_400_with_every_verdict_when_nothing_was_imported(client, admin):
    response = _post(client, admin, json.dumps(MIXED_EXPORT))
    assert response.status_code == 400
    data = response.json()
    assert data["imported"] is False
    assert [e["outcome"] for e in data["entries"]] == ["not_imported", "refused", "refused"]
    assert [e["field"] for e in data["errors"]] == ["entries[2]", "entries[3]"]
    assert data["errors"][0]["line"] == 3
    assert Toolkit.objects.count() == 0


def test_the_api_refuses_what_is_not_an_export(client, admin):
    response = _post(client, admin, "[1]")
    assert response.status_code == 400
    assert response.json()["errors"][0]["message"].startswith("An Open WebUI export is a JSON list")


def test_the_api_is_for_admins_only(client, alice):
    assert _post(client, alice, json.dumps(GOOD_EXPORT)).status_code == 404
    assert Toolkit.objects.count() == 0
    assert client.post("/api/v1/imports/openwebui", data="[]", content_type="application/json").status_code == 401
