"""The New toolkit page (/toolkits/new/) and the Upload new revision action
(/toolkits/<slug>/upload/).

People (see conftest): admin is staff, alice and bob are toolkit authors (alice owns the
toolkits here), carol is a plain user who may not upload.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

NEW = reverse("toolkit_new")

GOOD = '''"""
title: Weather Report
author: Grace Hopper
version: 1.2.0
requirements: requests>=2
"""


class Tools:
    def forecast(self, city: str) -> str:
        """Tell the weather."""
        return "sunny in " + city
'''

SECOND = GOOD.replace("version: 1.2.0", "version: 1.3.0").replace('"sunny in "', '"rainy in "')


def _file(content: bytes | str, name: str = "weather.py") -> SimpleUploadedFile:
    data = content.encode() if isinstance(content, str) else content
    return SimpleUploadedFile(name, data, content_type="text/x-python")


def _nothing_stored() -> bool:
    return Toolkit.objects.count() == 0 and Revision.objects.count() == 0


def _error_row(body: str, line: int) -> str:
    """The listing row of a source line, which carries the errors found on it."""
    match = re.search(rf'<tr id="src-{line}" class="has-error">.*?</tr>', body, re.S)
    assert match, f"line {line} is not marked as having an error"
    return match.group(0)


# -- The New toolkit page -------------------------------------------------------------------


def test_it_shows_the_form_with_file_input_paste_area_and_slug(client, alice):
    client.force_login(alice)
    response = client.get(NEW)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'type="file" name="file"' in body
    assert 'name="source"' in body
    assert 'name="slug"' in body
    assert 'enctype="multipart/form-data"' in body


def test_it_creates_a_toolkit_from_a_file(client, alice):
    client.force_login(alice)
    response = client.post(NEW, {"file": _file(GOOD)})
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_detail", args=["weather_report"])
    toolkit = Toolkit.objects.get()
    assert toolkit.slug == "weather_report"
    assert toolkit.owner == alice
    assert toolkit.title == "Weather Report"
    assert toolkit.author == "Grace Hopper"


def test_it_stores_sha256_version_and_uploader_of_the_first_revision(client, alice):
    client.force_login(alice)
    client.post(NEW, {"file": _file(GOOD)})
    revision = Revision.objects.get()
    assert revision.number == 1
    assert revision.sha256 == hashlib.sha256(GOOD.encode()).hexdigest()
    assert revision.version == "1.2.0"
    assert revision.uploaded_by == alice
    assert revision.source == GOOD
    assert revision.created_at is not None
    assert revision.tool_names == ["forecast"]
    assert revision.requirement_texts == ["requests>=2"]
    assert Toolkit.objects.get().current_revision == revision


def test_it_creates_a_toolkit_from_pasted_source(client, alice):
    client.force_login(alice)
    # Browsers submit a textarea with CRLF line ends.
    response = client.post(NEW, {"source": GOOD.replace("\n", "\r\n")})
    assert response.status_code == 302
    revision = Revision.objects.get()
    assert revision.toolkit.slug == "weather_report"
    # Pasting the same text as a file gives the same digest.
    assert revision.sha256 == hashlib.sha256(GOOD.encode()).hexdigest()


def test_it_shows_a_success_message_after_upload(client, alice):
    client.force_login(alice)
    response = client.post(NEW, {"file": _file(GOOD)}, follow=True)
    assert "Toolkit uploaded as revision 1." in response.content.decode()


def test_it_takes_the_slug_from_the_file_name_without_a_title(client, alice):
    client.force_login(alice)
    source = GOOD.replace("title: Weather Report\n", "")
    client.post(NEW, {"file": _file(source, name="My Forecast.py")})
    assert Toolkit.objects.get().slug == "my_forecast"


def test_it_lets_the_author_choose_the_slug_on_first_upload(client, alice):
    client.force_login(alice)
    response = client.post(NEW, {"file": _file(GOOD), "slug": "wx"})
    assert response.status_code == 302
    assert Toolkit.objects.get().slug == "wx"


def test_it_refuses_an_invalid_slug(client, alice):
    client.force_login(alice)
    response = client.post(NEW, {"file": _file(GOOD), "slug": "Not A Slug!"})
    assert response.status_code == 200
    assert "is not valid" in response.content.decode()
    assert _nothing_stored()


def test_it_refuses_a_taken_slug_with_a_clear_error(client, alice, bob, upload):
    upload(bob, GOOD)
    client.force_login(alice)
    response = client.post(NEW, {"file": _file(SECOND)})
    assert response.status_code == 200
    body = response.content.decode()
    assert "A toolkit with the slug &#x27;weather_report&#x27; exists already; choose another slug, such as &#x27;weather_report_2&#x27;." in body
    # The slug field is there to choose another one.
    assert 'name="slug"' in body
    assert Toolkit.objects.count() == 1
    assert Revision.objects.count() == 1


def test_it_refuses_a_chosen_slug_that_is_taken(client, alice, bob, upload):
    upload(bob, GOOD, slug="wx")
    client.force_login(alice)
    response = client.post(NEW, {"source": SECOND.replace("Weather Report", "Other"), "slug": "wx"})
    assert response.status_code == 200
    assert "exists already" in response.content.decode()
    assert 'value="wx"' in response.content.decode()
    assert Toolkit.objects.count() == 1


def test_it_refuses_the_slug_of_the_new_toolkit_page(client, alice):
    client.force_login(alice)
    # A toolkit at /toolkits/new/ could never be opened: that is this page.
    response = client.post(NEW, {"source": GOOD.replace("title: Weather Report", "title: New")})
    assert response.status_code == 200
    assert "The slug &#x27;new&#x27; is reserved" in response.content.decode()
    response = client.post(NEW, {"source": GOOD, "slug": "new"})
    assert "is reserved" in response.content.decode()
    assert _nothing_stored()


def test_it_asks_for_a_file_or_source_when_both_are_empty(client, alice):
    client.force_login(alice)
    response = client.post(NEW, {"source": "   "})
    assert response.status_code == 200
    assert "Choose a file or paste the source of a toolkit." in response.content.decode()
    assert _nothing_stored()


def test_it_refuses_a_600_kib_file(client, alice):
    client.force_login(alice)
    big = GOOD + "#" * (600 * 1024) + "\n"
    response = client.post(NEW, {"file": _file(big)})
    assert response.status_code == 200
    body = response.content.decode()
    assert "the limit is 512 KiB" in body
    # The real size, not the part read to find out it is too big.
    assert f"{len(big):,} bytes" in body
    assert _nothing_stored()


def test_it_refuses_600_kib_of_pasted_source(client, alice):
    client.force_login(alice)
    big = GOOD + "#" * (600 * 1024) + "\n"
    response = client.post(NEW, {"source": big})
    assert response.status_code == 200
    assert "the limit is 512 KiB" in response.content.decode()
    assert _nothing_stored()


def test_it_refuses_latin_1_bytes_next_to_their_line(client, alice):
    client.force_login(alice)
    data = GOOD.replace("Grace Hopper", "Françoise").encode("latin-1")
    response = client.post(NEW, {"file": _file(data)})
    assert response.status_code == 200
    body = response.content.decode()
    assert "The file is not valid UTF-8: byte 0xe7" in body
    row = _error_row(body, 3)
    assert "not valid UTF-8" in row
    assert _nothing_stored()


def test_it_shows_a_syntax_error_at_its_line(client, alice):
    client.force_login(alice)
    source = GOOD.replace('        return "sunny in " + city', '        return "sunny in " +')
    response = client.post(NEW, {"source": source})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Syntax error at line 12" in body
    assert 'href="#src-12"' in body
    row = _error_row(body, 12)
    assert "Syntax error" in row
    assert "return &quot;sunny in &quot; +" in row
    assert _nothing_stored()


def test_it_keeps_pasted_source_in_the_form_after_an_error(client, alice):
    client.force_login(alice)
    source = GOOD.replace("class Tools:", "class Tools")
    response = client.post(NEW, {"source": source})
    assert "class Tools\n" in response.content.decode()


def test_it_refuses_pip_options_in_requirements_naming_the_token(client, alice):
    client.force_login(alice)
    source = GOOD.replace("requirements: requests>=2", "requirements: --extra-index-url http://x, requests")
    response = client.post(NEW, {"file": _file(source)})
    assert response.status_code == 200
    body = response.content.decode()
    assert "`--extra-index-url http://x` in `requirements:` on line 5 is a pip option" in body
    row = _error_row(body, 5)
    assert "is a pip option" in row
    assert "requirements: --extra-index-url http://x, requests" in row
    assert _nothing_stored()


def test_it_refuses_a_file_without_a_tools_class(client, alice):
    client.force_login(alice)
    source = GOOD.replace("class Tools:", "class Helpers:")
    response = client.post(NEW, {"file": _file(source)})
    assert response.status_code == 200
    assert "No `class Tools` at module level" in response.content.decode()
    assert _nothing_stored()


def test_it_lists_every_problem_at_once(client, alice):
    client.force_login(alice)
    source = GOOD.replace("requirements: requests>=2", "requirements: ./local.whl, https://x/y.whl")
    response = client.post(NEW, {"source": source})
    body = response.content.decode()
    assert "The toolkit has 2 problems; nothing was stored." in body
    assert "is a file path" in body
    assert "is a URL" in body
    assert _nothing_stored()


def test_it_refuses_a_title_too_long_to_store(client, alice):
    client.force_login(alice)
    source = GOOD.replace("Weather Report", "W" * 300)
    response = client.post(NEW, {"source": source, "slug": "long"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "title" in _error_row(body, 2)
    assert _nothing_stored()


def test_it_escapes_hostile_source_in_the_error_listing(client, alice):
    client.force_login(alice)
    source = GOOD.replace("class Tools:", "class Tools: <script>alert(1)</script>")
    body = client.post(NEW, {"source": source}).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_it_forbids_a_plain_user(client, carol):
    client.force_login(carol)
    assert client.get(NEW).status_code == 403
    assert client.post(NEW, {"file": _file(GOOD)}).status_code == 403
    assert _nothing_stored()


def test_it_lets_an_admin_upload(client, admin):
    client.force_login(admin)
    assert client.post(NEW, {"file": _file(GOOD)}).status_code == 302
    assert Toolkit.objects.get().owner == admin


def test_it_redirects_anonymous_users_to_login(client):
    response = client.post(NEW, {"file": _file(GOOD)})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert _nothing_stored()


def test_it_rejects_put(client, alice):
    client.force_login(alice)
    assert client.put(NEW).status_code == 405


# -- Upload new revision ----------------------------------------------------------------------


def _upload_url(slug: str = "weather_report") -> str:
    return reverse("toolkit_upload", args=[slug])


def test_it_shows_the_revision_form_to_the_owner(client, alice, upload):
    upload(alice, GOOD)
    client.force_login(alice)
    response = client.get(_upload_url())
    assert response.status_code == 200
    body = response.content.decode()
    assert "Upload new revision" in body
    assert 'type="file" name="file"' in body
    # The slug is fixed after the first upload.
    assert 'name="slug"' not in body


def test_it_adds_a_revision_for_the_owner(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    response = client.post(_upload_url(), {"file": _file(SECOND)})
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_revisions", args=["weather_report"])
    latest = toolkit.latest_revision()
    assert latest.number == 2
    assert latest.version == "1.3.0"
    assert latest.uploaded_by == alice
    assert Toolkit.objects.count() == 1


def test_it_adds_a_revision_from_pasted_source(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    assert client.post(_upload_url(), {"source": SECOND}).status_code == 302
    assert toolkit.revisions.count() == 2


def test_it_lets_an_admin_add_a_revision(client, admin, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(admin)
    assert client.post(_upload_url(), {"file": _file(SECOND)}).status_code == 302
    assert toolkit.latest_revision().uploaded_by == admin
    toolkit.refresh_from_db()
    assert toolkit.owner == alice


def test_it_forbids_another_author(client, alice, bob, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(bob)
    assert client.get(_upload_url()).status_code == 403
    assert client.post(_upload_url(), {"file": _file(SECOND)}).status_code == 403
    assert toolkit.revisions.count() == 1


def test_it_forbids_a_plain_user_to_add_a_revision(client, alice, carol, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(carol)
    assert client.post(_upload_url(), {"file": _file(SECOND)}).status_code == 403
    assert toolkit.revisions.count() == 1


def test_it_redirects_anonymous_users_from_the_revision_form(client, alice, upload):
    upload(alice, GOOD)
    response = client.post(_upload_url(), {"file": _file(SECOND)})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_answers_404_for_an_unknown_toolkit(client, alice):
    client.force_login(alice)
    assert client.get(_upload_url("nope")).status_code == 404
    assert client.post(_upload_url("nope"), {"file": _file(GOOD)}).status_code == 404


def test_identical_source_adds_no_revision(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    response = client.post(_upload_url(), {"file": _file(GOOD)}, follow=True)
    assert response.status_code == 200
    assert "The source is identical to revision 1; nothing was added." in response.content.decode()
    assert toolkit.revisions.count() == 1


def test_identical_source_pasted_with_crlf_adds_no_revision(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    client.post(_upload_url(), {"source": GOOD.replace("\n", "\r\n")})
    assert toolkit.revisions.count() == 1


def test_a_bad_revision_shows_errors_and_stores_nothing(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    source = SECOND.replace("requirements: requests>=2", "requirements: --extra-index-url http://x, requests")
    response = client.post(_upload_url(), {"source": source})
    assert response.status_code == 200
    assert "is a pip option" in _error_row(response.content.decode(), 5)
    assert toolkit.revisions.count() == 1


def test_a_600_kib_revision_is_refused(client, alice, upload):
    toolkit = upload(alice, GOOD)
    client.force_login(alice)
    response = client.post(_upload_url(), {"file": _file(GOOD + "#" * (600 * 1024))})
    assert response.status_code == 200
    assert "the limit is 512 KiB" in response.content.decode()
    assert toolkit.revisions.count() == 1


def test_the_revision_form_rejects_delete(client, alice, upload):
    upload(alice, GOOD)
    client.force_login(alice)
    assert client.delete(_upload_url()).status_code == 405


def test_it_points_at_the_right_line_after_a_form_feed(client, alice):
    client.force_login(alice)
    # A form feed ends no line for Python, so it must not shift the listing either.
    source = GOOD.replace("\nclass Tools:", "# page\x0cbreak\nclass Tools:")
    source = source.replace('        return "sunny in " + city', '        return "sunny in " +')
    response = client.post(NEW, {"source": source})
    row = _error_row(response.content.decode(), 12)
    assert "return &quot;sunny in &quot; +" in row
