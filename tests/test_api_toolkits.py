"""The Toolkits endpoints of the HTTP API (docs/api.md).

People (see conftest): admin is staff, alice owns the toolkits here, bob is another author
who owns nothing of alice's, carol is a plain user who may view but not upload.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client
from django.utils import timezone

from toolhub.accounts.models import ApiToken
from toolhub.toolkits.models import Revision, Toolkit

pytestmark = pytest.mark.django_db

BASE = "/api/v1"

V1 = '''"""
title: Weather Report
author: Grace Hopper
version: 1.0.0
requirements: requests>=2
"""


class Tools:
    class Valves:
        pass

    def forecast(self, city: str) -> str:
        """Tell the weather."""
        return "sunny in " + city
'''

V2 = V1.replace("version: 1.0.0", "version: 2.0.0").replace('"sunny in "', '"rainy in "')


class Api:
    """A JSON client that sends one user's bearer token."""

    def __init__(self, raw: str | None):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {raw}"} if raw else {}

    def _send(self, method: str, path: str, body=None, **extra):
        kwargs = {"headers": {**self.headers, **extra.pop("headers", {})}, **extra}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        return getattr(self.client, method)(BASE + path, **kwargs)

    def get(self, path, **extra):
        return self._send("get", path, **extra)

    def post(self, path, body=None, **extra):
        return self._send("post", path, body, **extra)

    def put(self, path, body=None, **extra):
        return self._send("put", path, body, **extra)

    def delete(self, path, **extra):
        return self._send("delete", path, **extra)

    def patch(self, path, body=None, **extra):
        return self._send("patch", path, body, **extra)


def _api(user) -> Api:
    _token, raw = ApiToken.issue(user=user, name="tests")
    return Api(raw)


@pytest.fixture
def as_alice(alice):
    return _api(alice)


@pytest.fixture
def as_bob(bob):
    return _api(bob)


@pytest.fixture
def as_carol(carol):
    return _api(carol)


@pytest.fixture
def as_admin(admin):
    return _api(admin)


@pytest.fixture
def toolkit(alice, upload):
    return upload(alice, V1)


def _is_error(response, status: int) -> list[dict]:
    """The response is `status` with the one error shape of the API, and nothing else."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["errors"]
    assert body["errors"]
    for error in body["errors"]:
        assert set(error) == {"message", "field", "line"}
        assert isinstance(error["message"], str) and error["message"]
    return body["errors"]


def _nothing_stored() -> bool:
    return Toolkit.objects.count() == 0 and Revision.objects.count() == 0


# -- GET /toolkits ----------------------------------------------------------------------------


def test_it_lists_toolkits(as_carol, toolkit):
    response = as_carol.get("/toolkits")
    assert response.status_code == 200
    assert response.json() == {
        "items": [
            {
                "slug": "weather_report",
                "title": "Weather Report",
                "version": "1.0.0",
                "revision": 1,
                "status": "awaiting_approval",
                "tool_names": ["forecast"],
            }
        ],
        "next_cursor": None,
    }


def test_it_lists_nothing_when_there_are_no_toolkits(as_carol):
    assert as_carol.get("/toolkits").json() == {"items": [], "next_cursor": None}


def test_it_filters_the_list(as_carol, alice, upload):
    upload(alice, V1)
    upload(alice, V1.replace("Weather Report", "Stock Prices").replace("Grace Hopper", "Ada"))
    assert [t["slug"] for t in as_carol.get("/toolkits?q=stock").json()["items"]] == ["stock_prices"]
    assert [t["slug"] for t in as_carol.get("/toolkits?q=hopper").json()["items"]] == ["weather_report"]


def test_its_list_query_count_does_not_grow(as_carol, alice, upload, django_assert_num_queries):
    for i in range(3):
        upload(alice, V1.replace("Weather Report", f"Few {i}"))
    as_carol.get("/toolkits")
    # The token, updating its last use is done; then the toolkits with their revisions.
    with django_assert_num_queries(2):
        assert len(as_carol.get("/toolkits").json()["items"]) == 3
    for i in range(27):
        upload(alice, V1.replace("Weather Report", f"More {i}"))
    with django_assert_num_queries(2):
        assert len(as_carol.get("/toolkits").json()["items"]) == 30


# -- GET /toolkits/{slug} ---------------------------------------------------------------------


def test_it_returns_a_toolkit(as_carol, toolkit):
    response = as_carol.get("/toolkits/weather_report")
    assert response.status_code == 200
    body = response.json()
    assert body["slug"] == "weather_report"
    assert body["title"] == "Weather Report"
    assert body["author"] == "Grace Hopper"
    assert body["version"] == "1.0.0"
    assert body["revision"] == 1
    assert body["status"] == "awaiting_approval"
    assert body["status_detail"] == "Waiting for an admin to approve: requests"
    assert body["manifest"] == {
        "title": "Weather Report", "author": "Grace Hopper", "version": "1.0.0", "requirements": "requests>=2",
    }
    assert body["requirements"] == ["requests>=2"]
    assert body["tool_names"] == ["forecast"]
    [revision] = body["revisions"]
    assert revision["revision"] == 1
    assert revision["sha256"] == hashlib.sha256(V1.encode()).hexdigest()
    assert revision["version"] == "1.0.0"
    assert revision["uploaded_by"] == "alice"
    assert revision["created_at"]
    assert body["display"]["title"] == "Weather Report"


def test_tools_and_valves_are_empty_before_the_toolkit_is_ready(as_carol, toolkit):
    # Even if a worker has filled them in, they are not shown until the status is ready.
    revision = toolkit.current_revision
    revision.tools = [{"type": "function", "function": {"name": "forecast"}}]
    revision.valves_schema = {"type": "object"}
    revision.save()
    body = as_carol.get("/toolkits/weather_report").json()
    assert body["tools"] == []
    assert body["valves_schema"] is None
    assert body["user_valves_schema"] is None


def test_tools_and_valves_are_filled_once_ready(as_carol, toolkit):
    revision = toolkit.current_revision
    revision.status = "ready"
    revision.tools = [{"type": "function", "function": {"name": "forecast", "description": "", "parameters": {}}}]
    revision.valves_schema = {"type": "object", "properties": {}}
    revision.save()
    body = as_carol.get("/toolkits/weather_report").json()
    assert body["tools"][0]["function"]["name"] == "forecast"
    assert body["valves_schema"] == {"type": "object", "properties": {}}


def test_an_unknown_slug_answers_404(as_carol):
    errors = _is_error(as_carol.get("/toolkits/nope"), 404)
    assert errors[0]["message"] == "Not found."


# -- POST /toolkits ---------------------------------------------------------------------------


def test_an_author_creates_a_toolkit(as_alice, alice):
    response = as_alice.post("/toolkits", {"source": V1})
    assert response.status_code == 201
    body = response.json()
    assert body["slug"] == "weather_report"
    assert body["revision"] == 1
    toolkit = Toolkit.objects.get()
    assert toolkit.owner == alice
    revision = toolkit.current_revision
    assert revision.sha256 == hashlib.sha256(V1.encode()).hexdigest()
    assert revision.version == "1.0.0"
    assert revision.uploaded_by == alice


def test_an_author_chooses_the_slug(as_alice):
    response = as_alice.post("/toolkits", {"source": V1, "slug": "wx"})
    assert response.status_code == 201
    assert response.json()["slug"] == "wx"


def test_an_admin_creates_a_toolkit(as_admin):
    assert as_admin.post("/toolkits", {"source": V1}).status_code == 201


def test_create_answers_400_with_line_numbered_errors(as_alice):
    source = V1.replace("requirements: requests>=2", "requirements: --extra-index-url http://x, requests")
    source = source.replace('        return "sunny in " + city', '        return "sunny in" +')
    errors = _is_error(as_alice.post("/toolkits", {"source": source}), 400)
    assert [e["line"] for e in errors] == [5, 15]
    assert "is a pip option" in errors[0]["message"]
    assert "Syntax error" in errors[1]["message"]
    assert all(e["field"] == "source" for e in errors)
    assert _nothing_stored()


def test_create_answers_400_for_a_file_without_tools(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"source": "x = 1\n"}), 400)
    assert "No `class Tools`" in errors[0]["message"]
    assert errors[0]["line"] is None
    assert _nothing_stored()


def test_create_answers_400_for_an_invalid_slug(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"source": V1, "slug": "Bad Slug"}), 400)
    assert errors[0]["field"] == "slug"
    assert _nothing_stored()


def test_create_answers_400_for_a_reserved_slug(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"source": V1, "slug": "new"}), 400)
    assert errors[0]["field"] == "slug"
    assert "reserved" in errors[0]["message"]
    assert _nothing_stored()


def test_create_answers_400_without_a_source(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"slug": "x"}), 400)
    assert errors[0]["field"] == "source"
    assert _nothing_stored()


def test_create_answers_400_for_a_body_that_is_not_json(as_alice):
    response = as_alice.post("/toolkits", content_type="application/json", data="{not json")
    _is_error(response, 400)
    assert _nothing_stored()


def test_create_answers_400_for_a_lone_surrogate(as_alice):
    # JSON can carry "\ud800", which no UTF-8 file can hold.
    source = V1.replace("Grace Hopper", "Grace \ud800 Hopper")
    errors = _is_error(as_alice.post("/toolkits", {"source": source}), 400)
    # Refused by the one check at the edge (toolhub.edge), which still says where.
    assert "cannot be stored (a lone UTF-16 surrogate) at line 3, column 15" in errors[0]["message"]
    assert errors[0]["field"] == "source"
    assert errors[0]["line"] == 3
    assert _nothing_stored()


def test_create_answers_413_for_a_source_over_512_kib(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"source": V1 + "#" * (512 * 1024)}), 413)
    assert errors[0]["field"] == "source"
    assert _nothing_stored()


def test_create_answers_413_for_a_body_over_the_request_limit(as_alice):
    errors = _is_error(as_alice.post("/toolkits", {"source": V1 + "#" * (3 * 1024 * 1024)}), 413)
    assert errors[0]["message"]
    assert _nothing_stored()


def test_create_answers_409_for_a_taken_slug(as_alice, bob, upload):
    upload(bob, V1)
    errors = _is_error(as_alice.post("/toolkits", {"source": V2}), 409)
    assert errors[0]["field"] == "slug"
    assert "exists already" in errors[0]["message"]
    assert Toolkit.objects.count() == 1
    assert Revision.objects.count() == 1


def test_create_forbids_a_plain_user(as_carol):
    _is_error(as_carol.post("/toolkits", {"source": V1}), 403)
    assert _nothing_stored()


# -- PUT /toolkits/{slug} ---------------------------------------------------------------------


def test_the_owner_uploads_a_new_revision(as_alice, toolkit):
    response = as_alice.put("/toolkits/weather_report", {"source": V2})
    assert response.status_code == 200
    body = response.json()
    assert [r["revision"] for r in body["revisions"]] == [1, 2]
    assert body["revisions"][1]["version"] == "2.0.0"
    assert toolkit.revisions.count() == 2


def test_an_admin_uploads_a_new_revision(as_admin, toolkit):
    assert as_admin.put("/toolkits/weather_report", {"source": V2}).status_code == 200
    assert toolkit.latest_revision().uploaded_by.username == "admin"


def test_unchanged_source_keeps_the_same_revision(as_alice, toolkit):
    response = as_alice.put("/toolkits/weather_report", {"source": V1})
    assert response.status_code == 200
    assert response.json()["revision"] == 1
    assert [r["revision"] for r in response.json()["revisions"]] == [1]
    assert toolkit.revisions.count() == 1


def test_another_author_may_not_upload_a_revision(as_bob, toolkit):
    _is_error(as_bob.put("/toolkits/weather_report", {"source": V2}), 403)
    assert toolkit.revisions.count() == 1


def test_a_plain_user_may_not_upload_a_revision(as_carol, toolkit):
    _is_error(as_carol.put("/toolkits/weather_report", {"source": V2}), 403)


def test_a_bad_revision_answers_400_and_stores_nothing(as_alice, toolkit):
    errors = _is_error(as_alice.put("/toolkits/weather_report", {"source": "class Tools:\n    def x(self) -> None\n"}), 400)
    assert errors[0]["line"] == 2
    assert toolkit.revisions.count() == 1


def test_a_revision_over_512_kib_answers_413(as_alice, toolkit):
    _is_error(as_alice.put("/toolkits/weather_report", {"source": V2 + "#" * (512 * 1024)}), 413)
    assert toolkit.revisions.count() == 1


def test_put_to_an_unknown_slug_answers_404(as_alice):
    _is_error(as_alice.put("/toolkits/nope", {"source": V2}), 404)


# -- POST /toolkits/{slug}/rollback -----------------------------------------------------------


@pytest.fixture
def two(alice, toolkit):
    from toolhub.toolkits import services

    services.revision_upload(toolkit=toolkit, source=V2, user=alice)
    toolkit.refresh_from_db()
    assert toolkit.current_revision.number == 2
    return toolkit


def test_the_owner_rolls_back(as_alice, two):
    response = as_alice.post("/toolkits/weather_report/rollback", {"revision": 1})
    assert response.status_code == 200
    body = response.json()
    assert body["revision"] == 1
    assert body["version"] == "1.0.0"
    assert [r["revision"] for r in body["revisions"]] == [1, 2]
    two.refresh_from_db()
    assert two.current_revision.number == 1


def test_an_admin_rolls_back(as_admin, two):
    assert as_admin.post("/toolkits/weather_report/rollback", {"revision": 1}).status_code == 200


def test_another_author_may_not_roll_back(as_bob, two):
    _is_error(as_bob.post("/toolkits/weather_report/rollback", {"revision": 1}), 403)
    two.refresh_from_db()
    assert two.current_revision.number == 2


def test_rollback_to_an_unknown_revision_answers_404(as_alice, two):
    errors = _is_error(as_alice.post("/toolkits/weather_report/rollback", {"revision": 9}), 404)
    assert errors[0]["field"] == "revision"


def test_rollback_without_a_revision_answers_400(as_alice, two):
    errors = _is_error(as_alice.post("/toolkits/weather_report/rollback", {}), 400)
    assert errors[0]["field"] == "revision"


def test_rollback_rejects_get(as_alice, two):
    _is_error(as_alice.get("/toolkits/weather_report/rollback"), 405)


# -- DELETE /toolkits/{slug} ------------------------------------------------------------------


def test_the_owner_deletes_a_toolkit(as_alice, two):
    response = as_alice.delete("/toolkits/weather_report")
    assert response.status_code == 204
    assert response.content == b""
    assert _nothing_stored()
    _is_error(as_alice.get("/toolkits/weather_report"), 404)


def test_an_admin_deletes_a_toolkit(as_admin, toolkit):
    assert as_admin.delete("/toolkits/weather_report").status_code == 204
    assert _nothing_stored()


def test_another_author_may_not_delete(as_bob, toolkit):
    _is_error(as_bob.delete("/toolkits/weather_report"), 403)
    assert Toolkit.objects.exists()


def test_a_plain_user_may_not_delete(as_carol, toolkit):
    _is_error(as_carol.delete("/toolkits/weather_report"), 403)
    assert Toolkit.objects.exists()


def test_delete_of_an_unknown_slug_answers_404(as_admin):
    _is_error(as_admin.delete("/toolkits/nope"), 404)


# -- Authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("get", "/toolkits", None),
        ("post", "/toolkits", {"source": V1}),
        ("get", "/toolkits/weather_report", None),
        ("put", "/toolkits/weather_report", {"source": V2}),
        ("post", "/toolkits/weather_report/rollback", {"revision": 1}),
        ("delete", "/toolkits/weather_report", None),
    ],
)
def test_anonymous_requests_answer_401(toolkit, method, path, body):
    anonymous = Api(None)
    # A real client (not Django's test client) gets CSRF checks; it must still see a 401.
    anonymous.client = Client(enforce_csrf_checks=True)
    args = (path,) if body is None else (path, body)
    errors = _is_error(getattr(anonymous, method)(*args), 401)
    assert "Authentication" in errors[0]["message"]
    assert Toolkit.objects.get().revisions.count() == 1


def test_an_unknown_token_answers_401(toolkit):
    _is_error(Api("th_not-a-real-token").get("/toolkits"), 401)
    api = Api("th_not-a-real-token")
    api.client = Client(enforce_csrf_checks=True)
    _is_error(api.post("/toolkits", {"source": V2}), 401)


def test_a_revoked_token_answers_401(alice, toolkit):
    token, raw = ApiToken.issue(user=alice, name="old")
    api = Api(raw)
    assert api.get("/toolkits").status_code == 200
    token.revoked_at = timezone.now()
    token.save()
    _is_error(api.get("/toolkits"), 401)


def test_a_token_of_a_deactivated_user_answers_401(alice, toolkit):
    api = _api(alice)
    alice.is_active = False
    alice.save()
    _is_error(api.get("/toolkits"), 401)


def test_a_token_records_when_it_was_last_used(alice):
    token, raw = ApiToken.issue(user=alice, name="t")
    Api(raw).get("/toolkits")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_the_browser_session_works_for_reads(client, carol, toolkit):
    client.force_login(carol)
    response = client.get(BASE + "/toolkits/weather_report")
    assert response.status_code == 200
    assert response.json()["slug"] == "weather_report"


def test_the_browser_session_needs_the_csrf_token_for_writes(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    refused = browser.post(BASE + "/toolkits", data=json.dumps({"source": V1}), content_type="application/json")
    _is_error(refused, 403)
    assert _nothing_stored()
    # A page sets the CSRF cookie; the page's script sends it back in a header.
    browser.get("/toolkits/")
    csrf = browser.cookies["csrftoken"].value
    accepted = browser.post(
        BASE + "/toolkits", data=json.dumps({"source": V1}), content_type="application/json",
        headers={"X-CSRFToken": csrf},
    )
    assert accepted.status_code == 201
    assert Toolkit.objects.count() == 1


# -- Wrong methods, unknown paths, OpenAPI ----------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [
        ("patch", "/toolkits"),
        ("delete", "/toolkits"),
        ("put", "/toolkits"),
        ("patch", "/toolkits/weather_report"),
        ("post", "/toolkits/weather_report"),
        ("get", "/toolkits/weather_report/rollback"),
        ("put", "/toolkits/weather_report/rollback"),
    ],
)
def test_a_wrong_method_answers_405_with_the_error_shape(as_alice, toolkit, method, path):
    response = getattr(as_alice, method)(path)
    errors = _is_error(response, 405)
    assert b"<" not in response.content
    assert "not allowed" in errors[0]["message"]
    assert response["Allow"]


def test_an_unknown_api_path_answers_404_with_the_error_shape(as_alice):
    response = as_alice.get("/no/such/endpoint")
    _is_error(response, 404)
    assert b"<" not in response.content


def test_the_openapi_document_lists_the_paths(client):
    response = client.get(BASE + "/openapi.json")
    assert response.status_code == 200
    document = response.json()
    paths = document["paths"]
    for path in ("/api/v1/toolkits", "/api/v1/toolkits/{slug}", "/api/v1/toolkits/{slug}/rollback"):
        assert path in paths
    assert set(paths["/api/v1/toolkits"]) >= {"get", "post"}
    assert set(paths["/api/v1/toolkits/{slug}"]) >= {"get", "put", "delete"}
    assert "ErrorOut" in document["components"]["schemas"]
