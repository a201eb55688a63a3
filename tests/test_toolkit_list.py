"""The toolkit list page (GET /toolkits/).

People (see conftest): admin is staff, alice and bob are toolkit authors, carol is a plain user.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

pytestmark = pytest.mark.django_db

URL = reverse("toolkit_list")


def _source(title: str, author: str = "Ada Lovelace", version: str = "1.0.0") -> str:
    return f'''"""
title: {title}
author: {author}
version: {version}
"""


class Tools:
    def hello(self, name: str) -> str:
        """Greet someone."""
        return "hello " + name
'''


def _rows(response) -> int:
    return response.content.decode().count('<tr>') - 1  # minus the header row


def test_it_lists_toolkits_with_version_tools_and_status(client, alice, upload):
    upload(alice, _source("Weather Report", author="Grace Hopper", version="2.3.1"))
    client.force_login(alice)
    response = client.get(URL)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Weather Report" in body
    assert "weather_report" in body
    assert "Grace Hopper" in body
    assert "2.3.1" in body
    assert "hello" in body
    assert 'data-status="building"' in body
    assert reverse("toolkit_detail", args=["weather_report"]) in body


def test_it_shows_toolkits_to_a_plain_user(client, alice, carol, upload):
    upload(alice, _source("Weather Report"))
    client.force_login(carol)
    response = client.get(URL)
    assert response.status_code == 200
    assert "Weather Report" in response.content.decode()


def test_it_searches_by_title(client, alice, upload):
    upload(alice, _source("Weather Report"))
    upload(alice, _source("Stock Prices"))
    client.force_login(alice)
    body = client.get(URL, {"q": "weather"}).content.decode()
    assert "Weather Report" in body
    assert "Stock Prices" not in body


def test_it_searches_by_author(client, alice, upload):
    upload(alice, _source("Weather Report", author="Grace Hopper"))
    upload(alice, _source("Stock Prices", author="Ada Lovelace"))
    client.force_login(alice)
    body = client.get(URL, {"q": "lovelace"}).content.decode()
    assert "Stock Prices" in body
    assert "Weather Report" not in body


def test_it_shows_a_translated_title(client, alice, upload):
    from toolhub.toolkits.models import Translation

    toolkit = upload(alice, _source("$t:weather.title"), slug="weather")
    Translation.objects.create(toolkit=toolkit, language="en", key="weather.title", text="Weather Report")
    client.force_login(alice)
    body = client.get(URL).content.decode()
    assert "Weather Report" in body
    assert "$t:" not in body


def test_it_says_when_nothing_matches_the_search(client, alice, upload):
    upload(alice, _source("Weather Report"))
    client.force_login(alice)
    body = client.get(URL, {"q": "zebra"}).content.decode()
    assert "No toolkit matches" in body
    assert "zebra" in body
    assert "Weather Report" not in body


def test_it_escapes_the_search_text(client, alice):
    client.force_login(alice)
    body = client.get(URL, {"q": "<script>x</script>"}).content.decode()
    assert "<script>x</script>" not in body
    assert "&lt;script&gt;x&lt;/script&gt;" in body


def test_it_paginates(client, alice, upload):
    for i in range(25):
        upload(alice, _source(f"Toolkit {i:02d}"))
    client.force_login(alice)
    first = client.get(URL)
    assert _rows(first) == 20
    assert "Page 1 of 2" in first.content.decode()
    assert "?page=2" in first.content.decode()
    second = client.get(URL, {"page": 2})
    assert _rows(second) == 5
    assert "Toolkit 24" in second.content.decode()
    assert "Toolkit 00" not in second.content.decode()


def test_it_keeps_the_search_in_page_links(client, alice, upload):
    for i in range(25):
        upload(alice, _source(f"Match {i:02d}"))
    client.force_login(alice)
    body = client.get(URL, {"q": "match"}).content.decode()
    assert "?q=match&amp;page=2" in body


def test_it_shows_the_last_page_for_a_page_number_out_of_range(client, alice, upload):
    upload(alice, _source("Weather Report"))
    client.force_login(alice)
    for page in ("99", "abc", "-1"):
        response = client.get(URL, {"page": page})
        assert response.status_code == 200
        assert "Weather Report" in response.content.decode()


def test_its_empty_state_points_an_author_to_new_toolkit(client, alice):
    client.force_login(alice)
    body = client.get(URL).content.decode()
    assert "No toolkits yet." in body
    assert reverse("toolkit_new") in body
    assert "Upload your first toolkit" in body


def test_its_empty_state_points_an_admin_to_new_toolkit(client, admin):
    client.force_login(admin)
    body = client.get(URL).content.decode()
    assert "Upload your first toolkit" in body
    assert reverse("toolkit_new") in body


def test_it_offers_new_toolkit_to_no_plain_user(client, carol):
    client.force_login(carol)
    body = client.get(URL).content.decode()
    assert "No toolkits yet." in body
    assert reverse("toolkit_new") not in body
    assert "Upload your first toolkit" not in body


def test_it_redirects_anonymous_users_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert "next=/toolkits/" in response["Location"]


def test_it_rejects_post(client, alice):
    client.force_login(alice)
    assert client.post(URL).status_code == 405


def test_it_rejects_put_and_delete(client, alice):
    client.force_login(alice)
    assert client.put(URL).status_code == 405
    assert client.delete(URL).status_code == 405


def _count_queries(client, n: int) -> int:
    client.get(URL)  # Warm up the session and caches outside the count.
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(URL)
    assert response.status_code == 200
    assert _rows(response) == n
    return len(ctx.captured_queries)


@pytest.mark.parametrize("count", [3, 30])
def test_its_query_count_is_pinned(client, alice, upload, django_assert_num_queries, count):
    for i in range(count):
        upload(alice, _source(f"Toolkit {i:02d}"))
    client.force_login(alice)
    client.get(URL)
    # The session, the user, her two permission lookups (may she upload?), the count for
    # the paginator, the page itself with each current revision joined in, and the
    # translations of the toolkits on the page.
    with django_assert_num_queries(7):
        response = client.get(URL)
    assert _rows(response) == min(count, 20)


def test_its_query_count_does_not_grow_with_the_number_of_toolkits(client, alice, upload):
    for i in range(3):
        upload(alice, _source(f"Few {i:02d}"))
    client.force_login(alice)
    few = _count_queries(client, 3)
    for i in range(27):
        upload(alice, _source(f"More {i:02d}"))
    many = _count_queries(client, 20)
    assert few == many
