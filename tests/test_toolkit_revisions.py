"""The pages of one toolkit: Overview, Source, Revisions, the diff, rollback and delete.

People (see conftest): admin is staff, alice owns the toolkits here, bob is another author
who owns nothing of alice's, carol is a plain user.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

V1 = '''"""
title: Weather Report
author: Grace Hopper
author_url: https://example.org/grace
funding_url: https://example.org/fund
version: 1.0.0
license: MIT
requirements: requests>=2, pydantic
"""


class Tools:
    def forecast(self, city: str) -> str:
        """Tell the weather."""
        return "sunny in " + city
'''

V2 = V1.replace("version: 1.0.0", "version: 2.0.0").replace(
    '        return "sunny in " + city\n',
    '        return "rainy in " + city\n\n    def humidity(self, city: str) -> int:\n        return 40\n',
)

HOSTILE = '''"""
title: Sneaky
author: <img src=x onerror=alert(1)>
funding_url: javascript:alert(document.cookie)
author_url: JavaScript:alert(2)
"""


class Tools:
    def run(self) -> str:
        """Docstring with <script>alert("x")</script> inside."""
        return "</pre><b>bold</b>"
'''


@pytest.fixture
def toolkit(alice, upload):
    return upload(alice, V1)


@pytest.fixture
def two(alice, toolkit):
    from toolhub.toolkits import services

    services.revision_upload(toolkit=toolkit, source=V2, user=alice)
    return Toolkit.objects.get(pk=toolkit.pk)


def _url(name: str, slug: str = "weather_report") -> str:
    return reverse(name, args=[slug])


# -- Overview -------------------------------------------------------------------------------


def test_the_overview_shows_the_manifest_table(client, carol, toolkit):
    client.force_login(carol)
    response = client.get(_url("toolkit_detail"))
    assert response.status_code == 200
    body = response.content.decode()
    assert '<th scope="row">title</th><td>Weather Report</td>' in body
    assert '<th scope="row">version</th><td>1.0.0</td>' in body
    assert '<th scope="row">license</th><td>MIT</td>' in body
    assert 'href="https://example.org/grace"' in body


def test_the_overview_lists_requirements_and_tool_names(client, carol, toolkit):
    client.force_login(carol)
    body = client.get(_url("toolkit_detail")).content.decode()
    assert "<code>requests&gt;=2</code>" in body
    assert "<code>pydantic</code>" in body
    assert "<code>forecast</code>" in body


def test_the_overview_has_a_support_link_for_funding_url(client, carol, toolkit):
    client.force_login(carol)
    body = client.get(_url("toolkit_detail")).content.decode()
    assert 'href="https://example.org/fund" class="button"' in body
    assert "Support the author" in body


def test_the_overview_has_no_support_link_without_funding_url(client, alice, carol, upload):
    upload(alice, V1.replace("funding_url: https://example.org/fund\n", ""))
    client.force_login(carol)
    assert "Support the author" not in client.get(_url("toolkit_detail")).content.decode()


def test_the_overview_renders_no_javascript_link(client, alice, carol, upload):
    upload(alice, HOSTILE)
    client.force_login(carol)
    response = client.get(_url("toolkit_detail", "sneaky"))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'href="javascript:' not in body.lower()
    assert "javascript:alert(document.cookie)" in body  # shown as text only
    assert "Support the author" not in body
    assert "<img src=x" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body


def test_the_overview_survives_a_malformed_url(client, alice, carol, upload):
    upload(alice, V1.replace("https://example.org/fund", "http://[broken").replace("https://example.org/grace", "https://[::1"))
    client.force_login(carol)
    response = client.get(_url("toolkit_detail"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "http://[broken" in body
    assert 'href="http://[broken' not in body


def test_the_overview_shows_manage_actions_to_the_owner_only(client, alice, bob, toolkit):
    client.force_login(alice)
    assert _url("toolkit_delete") in client.get(_url("toolkit_detail")).content.decode()
    client.force_login(bob)
    body = client.get(_url("toolkit_detail")).content.decode()
    assert _url("toolkit_delete") not in body
    assert _url("toolkit_upload") not in body


def test_the_overview_redirects_anonymous_users_to_login(client, toolkit):
    response = client.get(_url("toolkit_detail"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_overview_rejects_post(client, alice, toolkit):
    client.force_login(alice)
    assert client.post(_url("toolkit_detail")).status_code == 405


# -- Source ---------------------------------------------------------------------------------


def test_the_source_tab_shows_highlighted_source_with_line_numbers(client, carol, toolkit):
    client.force_login(carol)
    response = client.get(_url("toolkit_source"))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'class="source' in body
    assert 'href="#L-15"' in body  # a line number anchor
    assert '<span class="k">class</span>' in body
    assert '<span class="nc">Tools</span>' in body


def test_the_source_tab_escapes_hostile_content(client, alice, carol, upload):
    upload(alice, HOSTILE)
    client.force_login(carol)
    body = client.get(_url("toolkit_source", "sneaky")).content.decode()
    assert "<script>" not in body
    assert "</pre><b>" not in body
    assert "&lt;script&gt;" in body


def test_the_source_tab_shows_an_older_revision(client, carol, two):
    client.force_login(carol)
    body = client.get(_url("toolkit_source"), {"revision": 1}).content.decode()
    assert "Revision 1" in body
    assert "humidity" not in body
    body = client.get(_url("toolkit_source"), {"revision": 2}).content.decode()
    assert "humidity" in body


def test_the_source_tab_answers_404_for_an_unknown_revision(client, carol, toolkit):
    client.force_login(carol)
    assert client.get(_url("toolkit_source"), {"revision": 9}).status_code == 404
    assert client.get(_url("toolkit_source"), {"revision": "x"}).status_code == 404


def test_the_source_tab_redirects_anonymous_users_to_login(client, toolkit):
    assert client.get(_url("toolkit_source")).status_code == 302


def test_the_source_tab_rejects_post(client, alice, toolkit):
    client.force_login(alice)
    assert client.post(_url("toolkit_source")).status_code == 405


# -- Revisions and diff ---------------------------------------------------------------------


def test_the_history_lists_every_revision(client, carol, two):
    client.force_login(carol)
    response = client.get(_url("toolkit_revisions"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "#1" in body and "#2" in body
    assert "1.0.0" in body and "2.0.0" in body
    assert "alice" in body
    assert Revision.objects.get(number=2).sha256[:12] in body
    assert "Show diff" in body


def test_the_history_offers_rollback_to_the_owner_only(client, alice, bob, two):
    client.force_login(alice)
    assert "Roll back to this" in client.get(_url("toolkit_revisions")).content.decode()
    client.force_login(bob)
    assert "Roll back to this" not in client.get(_url("toolkit_revisions")).content.decode()


def test_the_history_redirects_anonymous_users_to_login(client, toolkit):
    assert client.get(_url("toolkit_revisions")).status_code == 302


def test_the_history_rejects_post(client, alice, toolkit):
    client.force_login(alice)
    assert client.post(_url("toolkit_revisions")).status_code == 405


def test_the_diff_shows_added_and_removed_lines(client, carol, two):
    client.force_login(carol)
    response = client.get(_url("toolkit_diff"), {"a": 1, "b": 2})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Changes from revision 1 to 2" in body
    assert '<span class="d-del">-version: 1.0.0</span>' in body
    assert '<span class="d-add">+version: 2.0.0</span>' in body
    assert '<span class="d-add">+    def humidity(self, city: str) -&gt; int:</span>' in body


def test_the_diff_works_backwards(client, carol, two):
    client.force_login(carol)
    body = client.get(_url("toolkit_diff"), {"a": 2, "b": 1}).content.decode()
    assert "Changes from revision 2 to 1" in body
    assert '<span class="d-add">+version: 1.0.0</span>' in body
    assert '<span class="d-del">-version: 2.0.0</span>' in body
    assert '<span class="d-del">-    def humidity(self, city: str) -&gt; int:</span>' in body


def test_the_diff_of_a_revision_with_itself_is_empty(client, carol, two):
    client.force_login(carol)
    body = client.get(_url("toolkit_diff"), {"a": 2, "b": 2}).content.decode()
    assert "The two revisions have the same source." in body


def test_the_diff_answers_404_for_unknown_or_missing_revisions(client, carol, two):
    client.force_login(carol)
    assert client.get(_url("toolkit_diff"), {"a": 1, "b": 7}).status_code == 404
    assert client.get(_url("toolkit_diff"), {"a": 1}).status_code == 404
    assert client.get(_url("toolkit_diff"), {"a": "x", "b": 1}).status_code == 404


def test_a_diff_of_two_hostile_sources_is_one_hunk_in_bounded_time(client, carol, alice, toolkit):
    """Half of 20,000 lines changed, every other one: difflib alone takes minutes to match
    them (quadratic), the page a fraction of a second."""
    import time

    from toolhub.toolkits import services
    from toolhub.toolkits.selectors import revision_diff

    lines = [f"x{i} = {i}" for i in range(20_000)]
    a = services.revision_upload(toolkit=toolkit, source=V1 + "\n".join(lines) + "\n", user=alice).revision
    changed = [line if i % 2 else f"y{i} = {i}" for i, line in enumerate(lines)]
    b = services.revision_upload(toolkit=toolkit, source=V1 + "\n".join(changed) + "\n", user=alice).revision
    started = time.monotonic()
    revision_diff(a=a, b=b)
    assert time.monotonic() - started < 2
    client.force_login(carol)
    body = client.get(_url("toolkit_diff"), {"a": a.number, "b": b.number}).content.decode()
    assert body.count('class="d-hunk"') == 1
    assert body.count('class="d-del"') == 19_999 and body.count('class="d-add"') == 19_999
    assert '<span class="d-del">-x0 = 0</span>' in body and '<span class="d-add">+y0 = 0</span>' in body


@pytest.mark.parametrize("head", [0, 1, 3, 5])
@pytest.mark.parametrize("tail", [0, 2, 4])
@pytest.mark.parametrize("removed, added", [(0, 2), (3, 0), (1, 1), (4, 2)])
def test_the_one_hunk_diff_reads_as_difflib_s(head, tail, removed, added):
    """Where the changed lines have nothing in common, difflib's answer is one hunk too: the
    same, line for line."""
    import difflib

    from toolhub.toolkits.selectors import _one_hunk

    same, end = [f"s{i}" for i in range(head)], [f"e{i}" for i in range(tail)]
    old = same + [f"o{i}" for i in range(removed)] + end
    new = same + [f"n{i}" for i in range(added)] + end
    expected = list(difflib.unified_diff(old, new, "a", "b", lineterm="", n=3))
    assert list(_one_hunk(old, new, head, tail, "a", "b")) == expected


def test_the_diff_redirects_anonymous_users_to_login(client, two):
    assert client.get(_url("toolkit_diff"), {"a": 1, "b": 2}).status_code == 302


def test_the_diff_rejects_post(client, alice, two):
    client.force_login(alice)
    assert client.post(_url("toolkit_diff") + "?a=1&b=2").status_code == 405


# -- Rollback -------------------------------------------------------------------------------


def test_rollback_makes_an_earlier_revision_current_and_keeps_history(client, alice, two):
    assert two.current_revision.number == 2
    client.force_login(alice)
    response = client.post(_url("toolkit_rollback"), {"revision": 1})
    assert response.status_code == 302
    assert response["Location"] == _url("toolkit_revisions")
    two.refresh_from_db()
    assert two.current_revision.number == 1
    assert sorted(two.revisions.values_list("number", flat=True)) == [1, 2]
    body = client.get(_url("toolkit_revisions")).content.decode()
    assert "Revision 1 is current again." in body


def test_rollback_restores_the_title_of_that_revision(client, alice, upload):
    from toolhub.toolkits import services

    toolkit = upload(alice, V1)
    services.revision_upload(toolkit=toolkit, source=V2.replace("Weather Report", "Weather Pro"), user=alice)
    toolkit.refresh_from_db()
    assert toolkit.title == "Weather Pro"
    client.force_login(alice)
    client.post(_url("toolkit_rollback"), {"revision": 1})
    toolkit.refresh_from_db()
    assert toolkit.title == "Weather Report"


def test_an_admin_may_roll_back(client, admin, two):
    client.force_login(admin)
    assert client.post(_url("toolkit_rollback"), {"revision": 1}).status_code == 302
    two.refresh_from_db()
    assert two.current_revision.number == 1


def test_rollback_rejects_get(client, alice, two):
    client.force_login(alice)
    assert client.get(_url("toolkit_rollback"), {"revision": 1}).status_code == 405
    two.refresh_from_db()
    assert two.current_revision.number == 2


def test_rollback_forbids_another_author(client, bob, two):
    client.force_login(bob)
    assert client.post(_url("toolkit_rollback"), {"revision": 1}).status_code == 403
    two.refresh_from_db()
    assert two.current_revision.number == 2


def test_rollback_forbids_a_plain_user(client, carol, two):
    client.force_login(carol)
    assert client.post(_url("toolkit_rollback"), {"revision": 1}).status_code == 403


def test_rollback_redirects_anonymous_users_to_login(client, two):
    response = client.post(_url("toolkit_rollback"), {"revision": 1})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    two.refresh_from_db()
    assert two.current_revision.number == 2


def test_rollback_to_an_unknown_revision_says_so(client, alice, two):
    client.force_login(alice)
    response = client.post(_url("toolkit_rollback"), {"revision": 9}, follow=True)
    assert "Revision 9 does not exist." in response.content.decode()
    two.refresh_from_db()
    assert two.current_revision.number == 2


def test_rollback_keeps_changes_made_to_the_toolkit_meanwhile(two):
    from toolhub.toolkits import services

    # Someone grants egress after this (stale) instance was read; an admin had reviewed
    # revision 1 (an unreviewed one could not become current again, see test_revision_review).
    Toolkit.objects.filter(pk=two.pk).update(egress_granted=True, egress_hosts=["api.example.org"])
    two.revisions.filter(number=1).update(review="approved")
    services.toolkit_rollback(toolkit=two, number=1)
    fresh = Toolkit.objects.get(pk=two.pk)
    assert fresh.current_revision.number == 1
    assert fresh.egress_granted is True
    assert fresh.egress_hosts == ["api.example.org"]


# -- Delete ---------------------------------------------------------------------------------


def test_delete_shows_a_confirmation_page(client, alice, toolkit):
    client.force_login(alice)
    response = client.get(_url("toolkit_delete"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Delete this toolkit?" in body
    assert 'name="confirm"' in body
    assert Toolkit.objects.filter(slug="weather_report").exists()


def test_delete_without_typing_the_slug_keeps_the_toolkit(client, alice, toolkit):
    client.force_login(alice)
    response = client.post(_url("toolkit_delete"), follow=True)
    assert "Type the toolkit&#x27;s slug to confirm." in response.content.decode()
    response = client.post(_url("toolkit_delete"), {"confirm": "something else"})
    assert response.status_code == 302
    assert Toolkit.objects.filter(slug="weather_report").exists()


def test_delete_with_the_slug_deletes_the_toolkit_and_its_revisions(client, alice, two):
    client.force_login(alice)
    response = client.post(_url("toolkit_delete"), {"confirm": "weather_report"})
    assert response.status_code == 302
    assert response["Location"] == reverse("toolkit_list")
    assert not Toolkit.objects.exists()
    assert not Revision.objects.exists()
    assert client.get(_url("toolkit_detail")).status_code == 404


def test_an_admin_may_delete(client, admin, toolkit):
    client.force_login(admin)
    client.post(_url("toolkit_delete"), {"confirm": "weather_report"})
    assert not Toolkit.objects.exists()


def test_delete_forbids_another_author(client, bob, toolkit):
    client.force_login(bob)
    assert client.get(_url("toolkit_delete")).status_code == 403
    assert client.post(_url("toolkit_delete"), {"confirm": "weather_report"}).status_code == 403
    assert Toolkit.objects.exists()


def test_delete_forbids_a_plain_user(client, carol, toolkit):
    client.force_login(carol)
    assert client.post(_url("toolkit_delete"), {"confirm": "weather_report"}).status_code == 403
    assert Toolkit.objects.exists()


def test_delete_redirects_anonymous_users_to_login(client, toolkit):
    response = client.post(_url("toolkit_delete"), {"confirm": "weather_report"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert Toolkit.objects.exists()


def test_delete_rejects_put(client, alice, toolkit):
    client.force_login(alice)
    assert client.put(_url("toolkit_delete")).status_code == 405


# -- Unknown toolkits -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, method",
    [
        ("toolkit_detail", "get"),
        ("toolkit_source", "get"),
        ("toolkit_revisions", "get"),
        ("toolkit_upload", "get"),
        ("toolkit_rollback", "post"),
        ("toolkit_delete", "get"),
        ("toolkit_delete", "post"),
    ],
)
def test_an_unknown_slug_answers_404(client, admin, name, method):
    client.force_login(admin)
    assert getattr(client, method)(_url(name, "no_such_toolkit"), {"revision": 1}).status_code == 404


def test_the_diff_of_an_unknown_slug_answers_404(client, admin):
    client.force_login(admin)
    assert client.get(_url("toolkit_diff", "no_such_toolkit"), {"a": 1, "b": 2}).status_code == 404


def test_after_a_rollback_the_page_says_which_revision_is_current(client, alice, two):
    Revision.objects.update(status="ready")
    client.force_login(alice)
    client.post(_url("toolkit_rollback"), {"revision": 1})
    body = client.get(_url("toolkit_detail")).content.decode()
    assert "Revision 1 is current after a rollback; revision 2 and the rest of the history are kept." in body
    assert "stays in use until it is ready" not in body


def test_a_newer_revision_being_built_is_announced(client, alice, toolkit):
    from toolhub.toolkits import services

    Revision.objects.update(status="ready")
    services.revision_upload(toolkit=toolkit, source=V2, user=alice)
    client.force_login(alice)
    body = client.get(_url("toolkit_detail")).content.decode()
    assert "Revision 2 is Awaiting approval; the current revision stays in use until it is ready." in body


def test_the_diff_escapes_hostile_content(client, alice, carol, upload):
    from toolhub.toolkits import services

    toolkit = upload(alice, HOSTILE)
    services.revision_upload(toolkit=toolkit, source=HOSTILE.replace("<b>bold</b>", "<i>x</i><script>y()</script>"), user=alice)
    client.force_login(carol)
    body = client.get(_url("toolkit_diff", "sneaky"), {"a": 1, "b": 2}).content.decode()
    assert "<script>y()</script>" not in body
    assert "&lt;script&gt;y()&lt;/script&gt;" in body


# -- The highlighting stylesheet --------------------------------------------------------------


def test_the_highlight_stylesheet_is_a_static_file_that_matches_pygments():
    # A view at /static/highlight.css was shadowed by the static files handler (a 404 under
    # `make run`); a committed file is served like every other stylesheet.
    from toolhub.toolkits.highlight import stylesheet

    committed = (Path(settings.BASE_DIR) / "static" / "css" / "highlight.css").read_text()
    assert stylesheet() in committed, "regenerate: python -m toolhub.toolkits.highlight > static/css/highlight.css"


def test_the_highlight_stylesheet_is_served_as_css_and_linked_from_the_source_tab(client, carol, toolkit):
    from django.templatetags.static import static

    client.force_login(carol)
    body = client.get(_url("toolkit_source", toolkit.slug)).content.decode()
    href = static("css/highlight.css")
    assert f'href="{href}"' in body
    response = client.get(href)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    css = b"".join(response.streaming_content) if response.streaming else response.content
    assert b".source .k " in css
