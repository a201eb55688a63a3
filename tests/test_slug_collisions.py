"""Two toolkits whose titles give the same slug: the New toolkit page offers a new revision
of the toolkit that has it or a new toolkit under a free slug; the API's 409 names one.

People (see conftest): admin is staff, alice and bob are toolkit authors.
"""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from toolhub.accounts.models import ApiToken
from toolhub.toolkits import services
from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

NEW = reverse("toolkit_new")

SCRAPE = '''"""
title: Web Scrape
"""


class Tools:
    def scrape(self, url: str) -> str:
        """Fetch a page."""
        return url
'''

OTHER_SCRAPE = SCRAPE.replace("return url", "return url.upper()")


def test_free_slug_counts_up_past_taken_ones(alice, upload):
    upload(alice, SCRAPE)
    assert services.free_slug("web_scrape") == "web_scrape_2"
    upload(alice, OTHER_SCRAPE, slug="web_scrape_2")
    assert services.free_slug("web_scrape") == "web_scrape_3"
    # A long slug is cut so that the number still fits in 64 characters.
    long = "x" * 64
    upload(alice, SCRAPE.replace("Web Scrape", long))
    assert services.free_slug(long) == "x" * 62 + "_2"


def test_the_page_offers_a_new_revision_or_a_free_slug_to_the_owner(client, alice, upload):
    upload(alice, SCRAPE)
    client.force_login(alice)
    response = client.post(NEW, {"source": OTHER_SCRAPE})
    assert response.status_code == 200
    body = response.content.decode()
    assert "The slug web_scrape is taken" in body
    assert f'action="{reverse("toolkit_upload", args=["web_scrape"])}"' in body
    assert "Upload as a new revision of web_scrape" in body
    assert '<input type="hidden" name="slug" value="web_scrape_2">' in body
    assert "Create web_scrape_2" in body
    assert Revision.objects.count() == 1


def test_both_offers_work(client, alice, upload):
    toolkit = upload(alice, SCRAPE)
    client.force_login(alice)
    # "Create web_scrape_2" posts the same source with the free slug.
    assert client.post(NEW, {"source": OTHER_SCRAPE, "slug": "web_scrape_2"}).status_code == 302
    assert Toolkit.objects.get(slug="web_scrape_2").current_revision.source == OTHER_SCRAPE
    # "Upload as a new revision" posts it to the other toolkit's upload page.
    third = OTHER_SCRAPE.replace("upper", "lower")
    assert client.post(reverse("toolkit_upload", args=["web_scrape"]), {"source": third}).status_code == 302
    assert list(toolkit.revisions.order_by("number").values_list("number", flat=True)) == [1, 2]


def test_another_author_is_only_offered_the_free_slug(client, alice, bob, upload):
    upload(alice, SCRAPE)
    client.force_login(bob)
    body = client.post(NEW, {"source": OTHER_SCRAPE}).content.decode()
    assert "Create web_scrape_2" in body
    assert "Upload as a new revision" not in body
    assert reverse("toolkit_upload", args=["web_scrape"]) not in body


def test_a_slug_the_uploader_chose_gets_no_offers(client, alice, upload):
    upload(alice, SCRAPE, slug="mine")
    client.force_login(alice)
    body = client.post(NEW, {"source": OTHER_SCRAPE, "slug": "mine"}).content.decode()
    assert "exists already; choose another slug, such as &#x27;mine_2&#x27;." in body
    assert "slug-taken" not in body


def test_the_offer_in_polish(client, alice, upload):
    upload(alice, SCRAPE)
    client.force_login(alice)
    body = client.post(NEW, {"source": OTHER_SCRAPE}, headers={"accept-language": "pl"}).content.decode()
    assert "Utwórz web_scrape_2" in body


def test_the_api_409_names_a_free_slug(client, bob, alice, upload):
    upload(bob, SCRAPE)
    _token, raw = ApiToken.issue(user=alice, name="tests")
    response = client.post(
        "/api/v1/toolkits", data=json.dumps({"source": OTHER_SCRAPE}), content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert error["field"] == "slug"
    assert error["message"] == (
        "A toolkit with the slug 'web_scrape' exists already; choose another slug, such as 'web_scrape_2'."
    )
    assert Toolkit.objects.count() == 1
