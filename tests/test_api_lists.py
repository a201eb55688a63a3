"""Lists that scale (docs/api.md, "Lists that scale"): `GET /api/v1/toolkits` and
`GET /api/v1/invocations` page with signed keyset cursors: every row once, in order, whatever
changes between pages; a cursor that was edited or comes from the other list is a 400 on the
`cursor` field; limits are bounded; a page costs the same queries at any size and depth; who
sees which invocations is the history's rule (admins everyone's, anyone else their own)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import toolkit_source
from tests.helpers import bearer_headers
from toolhub import keyset
from toolhub.accounts.clients import client_create
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.toolkits import access
from toolhub.toolkits.models import Use

pytestmark = pytest.mark.django_db


def get(client, user, url: str, **extra):
    return client.get(f"/api/v1{url}", **bearer_headers(user), **extra)


def all_pages(client, user, url: str) -> tuple[list[dict], int]:
    """Every item of a list, page after page, and how many pages it took."""
    items: list[dict] = []
    cursor, pages = None, 0
    while True:
        sep = "&" if "?" in url else "?"
        response = get(client, user, url + (f"{sep}cursor={cursor}" if cursor else ""))
        assert response.status_code == 200, response.content
        body = response.json()
        items += body["items"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return items, pages
        assert pages < 100


# Toolkits
# ------------------------------------------------------------------------------


@pytest.fixture
def toolkits(upload, alice):
    """Seven toolkits of alice's, two with the same title (the slug breaks the tie)."""
    made = [upload(alice, toolkit_source(title)) for title in ("Gamma", "Alpha", "Echo", "Beta", "Delta", "Foxtrot")]
    made.append(upload(alice, toolkit_source("Alpha"), slug="alpha_two"))
    return made


def test_toolkits_page_by_title_with_every_toolkit_once(client, toolkits, carol):
    items, pages = all_pages(client, carol, "/toolkits?limit=3")
    assert pages == 3
    assert [(t["title"], t["slug"]) for t in items] == [
        ("Alpha", "alpha"), ("Alpha", "alpha_two"), ("Beta", "beta"), ("Delta", "delta"), ("Echo", "echo"),
        ("Foxtrot", "foxtrot"), ("Gamma", "gamma"),
    ]
    whole = get(client, carol, "/toolkits").json()
    assert len(whole["items"]) == 7 and whole["next_cursor"] is None


def test_toolkit_pages_skip_what_the_caller_may_not_use_and_keep_the_search(client, toolkits, carol, admin):
    hidden = next(t for t in toolkits if t.slug == "beta")
    access.toolkit_set_access(toolkit=hidden, use=Use.ADMINS, groups=[], users=[], by=admin)
    items, _ = all_pages(client, carol, "/toolkits?limit=2")
    assert "beta" not in [t["slug"] for t in items] and len(items) == 6
    items, _ = all_pages(client, admin, "/toolkits?limit=2")
    assert len(items) == 7
    items, pages = all_pages(client, carol, "/toolkits?q=alpha&limit=1")
    assert [t["slug"] for t in items] == ["alpha", "alpha_two"] and pages == 2


def test_a_toolkit_added_between_pages_neither_repeats_nor_shifts_a_row(client, toolkits, carol, upload, alice):
    first = get(client, carol, "/toolkits?limit=3").json()
    upload(alice, toolkit_source("Aardvark"))  # sorts before every row already shown
    rest, _ = all_pages(client, carol, f"/toolkits?limit=3&cursor={first['next_cursor']}")
    assert [t["slug"] for t in first["items"] + rest] == [
        "alpha", "alpha_two", "beta", "delta", "echo", "foxtrot", "gamma"
    ]


def test_a_toolkit_page_costs_the_same_queries_at_any_size_and_depth(client, toolkits, carol, django_assert_num_queries):
    headers = bearer_headers(carol)
    first = client.get("/api/v1/toolkits?limit=2", **headers).json()
    # The token's lookup (with its user) and the page (the access rule is part of its query).
    with django_assert_num_queries(2):
        client.get("/api/v1/toolkits?limit=2", **headers)
    with django_assert_num_queries(2):
        client.get(f"/api/v1/toolkits?limit=5&cursor={first['next_cursor']}", **headers)
    with django_assert_num_queries(2):
        client.get("/api/v1/toolkits?limit=500", **headers)


@pytest.mark.parametrize(
    "query",
    ["cursor=nonsense", "cursor=" + "x" * (keyset.MAX_CURSOR_CHARS + 1), "limit=0", "limit=501", "limit=many"],
)
def test_a_bad_toolkit_cursor_or_limit_is_a_400_naming_the_parameter(client, carol, query):
    response = get(client, carol, f"/toolkits?{query}")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == query.split("=")[0]


def test_an_edited_toolkit_cursor_is_refused(client, toolkits, carol):
    cursor = get(client, carol, "/toolkits?limit=2").json()["next_cursor"]
    forged = keyset.encode("toolkits", ["Alpha", "alpha"])[:-2] + "xx"
    for bad in (cursor[:-1] + ("A" if cursor[-1] != "A" else "B"), forged):
        response = get(client, carol, f"/toolkits?cursor={bad}")
        assert response.status_code == 400
        assert response.json()["errors"][0] == {
            "message": "The cursor is not one this list gave out (it was changed, or is from another list).",
            "field": "cursor", "line": None,
        }


# Invocations
# ------------------------------------------------------------------------------


@pytest.fixture
def runs(toolkits, alice, carol, admin):
    """Invocations a minute apart, newest last: carol's five on `gamma` (two tools, three
    surfaces), alice's two on `echo`, one through a client credential."""
    gamma = next(t for t in toolkits if t.slug == "gamma")
    echo = next(t for t in toolkits if t.slug == "echo")
    credential, _raw = client_create(name="Open WebUI", by=admin)
    start = timezone.now() - timedelta(hours=1)
    spec = [
        (gamma, carol, "echo", RunStatus.SUCCEEDED, Surface.API, None),
        (gamma, carol, "echo", RunStatus.FAILED, Surface.MCP, credential),
        (echo, alice, "echo", RunStatus.SUCCEEDED, Surface.OPENAPI, None),
        (gamma, carol, "other", RunStatus.SUCCEEDED, Surface.MCP, credential),
        (gamma, carol, "echo", RunStatus.QUEUED, Surface.PAGE, None),
        (echo, alice, "echo", RunStatus.FAILED, Surface.API, None),
        (gamma, carol, "echo", RunStatus.SUCCEEDED, Surface.API, None),
    ]
    return [
        Invocation.objects.create(
            toolkit=kit, revision=kit.current_revision, tool=tool, user=user, status=status, surface=surface,
            client=client, created_at=start + timedelta(minutes=i), error="boom" if status == RunStatus.FAILED else "",
        )
        for i, (kit, user, tool, status, surface, client) in enumerate(spec)
    ]


def ids(items: list[dict]) -> list[str]:
    return [item["id"] for item in items]


def newest_first(rows: list[Invocation]) -> list[str]:
    return [str(r.id) for r in sorted(rows, key=lambda r: r.created_at, reverse=True)]


def test_people_list_their_own_invocations_newest_first_a_page_at_a_time(client, runs, carol):
    items, pages = all_pages(client, carol, "/invocations?limit=2")
    assert pages == 3
    assert ids(items) == newest_first([r for r in runs if r.user == carol])
    first = items[-1]
    assert first["toolkit"] == "gamma" and first["user"] == "carol" and first["surface"] == "api"
    assert set(first) == {"id", "toolkit", "revision", "tool", "status", "error", "user", "client", "surface",
                          "created_at", "started_at", "finished_at", "duration_ms", "limit"}


def test_admins_list_everyones_invocations_and_may_filter_by_user(client, runs, admin, alice):
    items, _ = all_pages(client, admin, "/invocations?limit=3")
    assert ids(items) == newest_first(runs)
    items, _ = all_pages(client, admin, "/invocations?user=alice")
    assert ids(items) == newest_first([r for r in runs if r.user == alice])


def test_someone_else_may_not_filter_by_another_user_but_may_name_themselves(client, runs, carol):
    refused = get(client, carol, "/invocations?user=alice")
    assert refused.status_code == 403
    assert refused.json()["errors"][0]["message"] == "Only admins may list other people's invocations."
    assert len(get(client, carol, "/invocations?user=carol").json()["items"]) == 5


def test_invocations_filter_by_toolkit_tool_status_client_surface_and_since(client, runs, admin):
    def listed(query: str) -> list[str]:
        return ids(all_pages(client, admin, f"/invocations?{query}")[0])

    assert listed("toolkit=echo") == newest_first(runs[2:3] + runs[5:6])
    assert listed("toolkit=gamma&tool=other") == [str(runs[3].id)]
    assert listed("status=failed") == newest_first([runs[1], runs[5]])
    assert listed("client=Open%20WebUI") == newest_first([runs[1], runs[3]])
    assert listed("surface=mcp&status=succeeded") == [str(runs[3].id)]
    since = runs[4].created_at.isoformat().replace("+00:00", "Z")
    assert listed(f"since={since}") == newest_first(runs[4:])
    assert listed(f"since={runs[4].created_at.replace(tzinfo=None).isoformat()}") == newest_first(runs[4:])
    assert listed("toolkit=nope") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [("status=exploded", "status"), ("surface=fax", "surface"), ("since=yesterday", "since"), ("limit=201", "limit"),
     ("limit=-1", "limit"), ("cursor=abc", "cursor"), ("toolkit=" + "x" * 201, "toolkit")],
)
def test_a_bad_invocation_filter_is_a_400_naming_it(client, runs, carol, query, field):
    response = get(client, carol, f"/invocations?{query}")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field


def test_a_toolkits_cursor_is_no_cursor_of_the_invocations(client, runs, carol):
    cursor = get(client, carol, "/toolkits?limit=1").json()["next_cursor"]
    response = get(client, carol, f"/invocations?cursor={cursor}")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "cursor"


def test_an_invocation_page_costs_the_same_queries_at_any_size_and_depth(client, runs, admin, carol, django_assert_num_queries):
    for user in (admin, carol):
        headers = bearer_headers(user)
        first = client.get("/api/v1/invocations?limit=2", **headers).json()
        # The token's lookup (with its user) and the page (toolkit, revision, user and client joined).
        with django_assert_num_queries(2):
            client.get("/api/v1/invocations?limit=2", **headers)
        with django_assert_num_queries(2):
            client.get(f"/api/v1/invocations?limit=200&cursor={first['next_cursor']}", **headers)


def test_invocations_are_not_listed_to_anonymous_callers_nor_client_credentials(client, runs, admin):
    assert client.get("/api/v1/invocations").status_code == 401
    _credential, raw = client_create(name="LibreChat", by=admin)
    response = client.get("/api/v1/invocations", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 403
    assert response.json()["errors"][0]["message"].startswith("A client credential cannot do this")


def test_the_invocation_list_answers_a_wrong_method_with_405_and_json(client, carol):
    response = client.delete("/api/v1/invocations", **bearer_headers(carol))
    assert response.status_code == 405
    assert response.json()["errors"][0]["message"].startswith("Method DELETE is not allowed")


def test_since_is_an_iso_time_not_a_number_of_seconds(client, carol):
    client.force_login(carol)
    response = client.get("/api/v1/invocations", {"since": "0.5"})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "since"
    assert client.get("/api/v1/invocations", {"since": "2026-01-31T00:00:00Z"}).status_code == 200
