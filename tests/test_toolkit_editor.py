"""The editor's server side: the on-demand source check (nothing stored), the Edit tab that
saves a new revision, and a failed upload keeping its text (also a file's) for the editor.

alice and bob are authors (alice owns the toolkit), carol is a plain user, admin is staff."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.conftest import toolkit_source
from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

GOOD = toolkit_source("Editor Tools")
# A dangling `+` on line 8.
BROKEN = '''"""
title: Broken Tools
"""


class Tools:
    def greet(self, name: str) -> str:
        return "hello " + name +
'''


def _check(client, source: str, **extra):
    return client.post(reverse("source_check"), {"source": source, **extra})


# -- The check -------------------------------------------------------------------------------


def test_the_check_answers_ok_with_the_tools_and_stores_nothing(client, alice):
    client.force_login(alice)
    response = _check(client, GOOD)
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["errors"] == []
    assert body["summary"] == "No problems found."
    assert body["tools"]
    assert not Toolkit.objects.exists()


def test_the_check_lists_errors_with_line_and_column(client, alice):
    client.force_login(alice)
    body = _check(client, BROKEN).json()
    assert body["ok"] is False
    assert body["summary"] == "1 problem; see the marked lines."
    [error] = body["errors"]
    assert (error["line"], error["column"]) == (8, 33)
    assert "invalid syntax" in error["message"]
    assert error["code"]
    assert not Toolkit.objects.exists()


def test_the_check_counts_problems_with_plurals(client, alice):
    client.force_login(alice)
    # Two refused requirement tokens: two problems.
    source = toolkit_source("Two Problems", requirements="--index-url=http://x, ./local")
    body = _check(client, source).json()
    assert len(body["errors"]) == 2
    assert body["summary"] == "2 problems; see the marked lines."


def test_the_check_summary_is_translated(client, alice):
    client.force_login(alice)
    body = client.post(reverse("source_check"), {"source": BROKEN}, HTTP_ACCEPT_LANGUAGE="fr").json()
    assert body["summary"] == "1 problème ; voir les lignes marquées."


def test_the_check_refuses_an_empty_source(client, alice):
    client.force_login(alice)
    body = _check(client, "   ").json()
    assert body["ok"] is False
    assert body["errors"][0]["message"] == "Choose a file or paste the source of a toolkit."


def test_the_check_refuses_a_source_over_the_limit_with_its_size(client, alice):
    client.force_login(alice)
    body = _check(client, GOOD + "#" * (600 * 1024)).json()
    assert body["ok"] is False
    assert body["errors"][0]["code"] == "too_large"


def test_the_check_uses_the_filename_only_as_a_name(client, alice):
    client.force_login(alice)
    assert _check(client, GOOD, filename="../../etc/passwd").json()["ok"] is True
    assert _check(client, GOOD, filename="dir/editor_tools.py").json()["ok"] is True


def test_the_check_rejects_get(client, alice):
    client.force_login(alice)
    assert client.get(reverse("source_check")).status_code == 405


def test_the_check_sends_anonymous_users_to_log_in(client):
    response = _check(client, GOOD)
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_the_check_refuses_users_who_may_not_upload(client, carol):
    client.force_login(carol)
    response = _check(client, GOOD)
    assert response.status_code == 403
    assert "detail" in response.json()


def test_the_check_allows_an_owner_who_is_no_longer_an_author(client, alice, upload):
    upload(alice, GOOD)
    alice.user_permissions.clear()
    client.force_login(alice)
    assert _check(client, GOOD).json()["ok"] is True


# -- The Edit tab ----------------------------------------------------------------------------


@pytest.fixture
def toolkit(alice, upload):
    return upload(alice, GOOD)


def test_the_edit_tab_starts_from_the_latest_revision(client, alice, toolkit):
    client.force_login(alice)
    response = client.get(reverse("toolkit_edit", args=[toolkit.slug]))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="id_source"' in body
    assert "Editor Tools" in body
    assert 'type="file"' not in body
    assert "Check and save as a new revision" in body


def test_saving_from_the_editor_adds_a_revision(client, alice, toolkit):
    client.force_login(alice)
    changed = GOOD.replace("version: 0.1.0", "version: 0.2.0")
    response = client.post(reverse("toolkit_edit", args=[toolkit.slug]), {"source": changed})
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_revisions", args=[toolkit.slug])
    latest = Revision.objects.filter(toolkit=toolkit).order_by("-number").first()
    assert (latest.number, latest.version) == (2, "0.2.0")


def test_a_failed_save_keeps_the_text_and_marks_the_errors(client, alice, toolkit):
    client.force_login(alice)
    response = client.post(reverse("toolkit_edit", args=[toolkit.slug]), {"source": BROKEN})
    assert response.status_code == 200
    assert response.context["pasted"] == BROKEN
    assert [(e["line"], e["column"]) for e in response.context["editor_errors"]] == [(8, 33)]
    body = response.content.decode()
    data = body.split('<script id="source-errors-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)[0]["line"] == 8
    assert Revision.objects.filter(toolkit=toolkit).count() == 1


def test_the_edit_tab_is_for_the_owner_and_admins(client, bob, carol, admin, toolkit):
    url = reverse("toolkit_edit", args=[toolkit.slug])
    for user in (bob, carol):
        client.force_login(user)
        assert client.get(url).status_code == 403
        assert client.post(url, {"source": GOOD + "\n"}).status_code == 403
    client.force_login(admin)
    assert client.get(url).status_code == 200
    assert Revision.objects.filter(toolkit=toolkit).count() == 1


def test_the_edit_tab_sends_anonymous_users_to_log_in(client, toolkit):
    response = client.get(reverse("toolkit_edit", args=[toolkit.slug]))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_the_edit_tab_rejects_other_methods_and_unknown_toolkits(client, alice, toolkit):
    client.force_login(alice)
    assert client.put(reverse("toolkit_edit", args=[toolkit.slug])).status_code == 405
    assert client.get(reverse("toolkit_edit", args=["nope"])).status_code == 404


def test_the_edit_tab_is_linked_for_managers_only(client, alice, carol, toolkit):
    url = reverse("toolkit_edit", args=[toolkit.slug])
    client.force_login(alice)
    assert f'href="{url}"' in client.get(reverse("toolkit_detail", args=[toolkit.slug])).content.decode()
    client.force_login(carol)
    assert f'href="{url}"' not in client.get(reverse("toolkit_detail", args=[toolkit.slug])).content.decode()


# -- A failed upload keeps its text ------------------------------------------------------------


def test_a_failed_file_upload_keeps_the_files_text_in_the_form(client, alice):
    client.force_login(alice)
    upload = SimpleUploadedFile("broken_tools.py", BROKEN.encode(), content_type="text/x-python")
    response = client.post(reverse("toolkit_new"), {"file": upload})
    assert response.status_code == 200
    assert response.context["pasted"] == BROKEN
    assert response.context["filename"] == "broken_tools.py"
    body = response.content.decode()
    assert "return &quot;hello &quot; + name +" in body
    assert not Toolkit.objects.exists()


def test_a_failed_upload_of_a_file_that_is_not_utf8_keeps_nothing(client, alice):
    client.force_login(alice)
    upload = SimpleUploadedFile("latin.py", b'"""\ntitle: \xe9t\xe9\n"""\n', content_type="text/x-python")
    response = client.post(reverse("toolkit_new"), {"file": upload})
    assert response.status_code == 200
    assert "pasted" not in response.context
    assert response.context["errors"][0].code == "not_utf8"


def test_the_editors_filename_names_the_toolkit_when_there_is_no_title(client, alice):
    client.force_login(alice)
    source = GOOD.replace("title: Editor Tools\n", "")
    response = client.post(reverse("toolkit_new"), {"source": source, "filename": "C:\\src\\from_disk.py"})
    assert response.status_code == 302
    assert Toolkit.objects.get().slug == "from_disk"
