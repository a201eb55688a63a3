"""The Usage page (admins), its CSV, the toolkit Overview's usage block and GET /api/v1/usage:
the figures they show equal the calls and errors counted straight from the invocations; who
may see what (anonymous, plain users, owners, admins, client credentials); wrong methods and
hostile ranges get a clear 4xx; query counts are pinned and do not grow with the history."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import example
from tests.helpers import bearer_headers
from tests.usage_fixtures import direct, fold_all, nearest_rank, same_bucket, seed
from toolhub.accounts import clients
from toolhub.runs.models import FINISHED, Invocation
from toolhub.usage import services

pytestmark = pytest.mark.django_db

URL = "/usage/"


@pytest.fixture
def seeded(admin, alice, bob, carol, upload):
    first = upload(alice, example("library_lookup"))
    second = upload(bob, example("library_lookup"), slug="second_lookup")
    app, _raw = clients.client_create(name="Open WebUI", by=admin)
    invocations = seed(toolkits=[first, second], users=[alice, bob, carol], clients=[app], count=800, hours=24 * 6)
    fold_all()
    invocations = list(Invocation.objects.select_related("toolkit", "user", "client"))
    return {"first": first, "second": second, "invocations": invocations, "app": app}


def _since_7d():
    return services.floor_hour(timezone.now() - timedelta(days=7))


def _cells(html: str, table_id: str) -> dict[str, tuple[int, int]]:
    """{row header: (calls, errors)} of a table on the page."""
    table = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S).group(0)
    found = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S):
        head = re.search(r'<th scope="row">(.*?)</th>', row, re.S)
        calls = re.search(r'<td class="c-calls">(\d+)</td>', row)
        errors = re.search(r'<td class="c-errors">(\d+)</td>', row)
        if head and calls:
            found[re.sub(r"<[^>]+>", "", head.group(1)).strip()] = (int(calls.group(1)), int(errors.group(1)))
    return found


# THE USAGE PAGE
# ------------------------------------------------------------------------------


def test_the_usage_page_shows_the_counts_of_the_invocations_per_user(client, admin, seeded) -> None:
    client.force_login(admin)
    response = client.get(URL, {"range": "7d", "group": "user"})
    assert response.status_code == 200
    html = response.content.decode()
    now = timezone.now()
    expected = direct(seeded["invocations"], key=lambda inv: inv.user.username, since=_since_7d(), until=now + timedelta(hours=1))
    assert _cells(html, "usage-groups") == {k: v[:2] for k, v in expected.items()}
    everything = direct(seeded["invocations"], key=lambda inv: 1, since=_since_7d(), until=now + timedelta(hours=1))[1]
    assert f'id="usage-calls">{everything[0]}<' in html and f'id="usage-errors">{everything[1]}<' in html
    assert "<svg" in html and 'role="img"' in html
    # The busiest and the most failing tools, with all their calls (not only those of the
    # hours in which they failed).
    per_tool = direct(seeded["invocations"], key=lambda inv: f"{inv.toolkit.slug} · {inv.tool}", since=_since_7d(), until=now + timedelta(hours=1))
    def listed(table: str) -> list[tuple[str, int, int]]:
        """(name, first number, second cell) of each row of a table."""
        part = html.split(f'id="{table}"')[1].split("</table>")[0]
        found = []
        for row in re.findall(r"<tr>(.*?)</tr>", part, re.S):
            head = re.search(r'<th scope="row">([^<]+)</th>', row)
            cells = re.findall(r"<td>([^<]*)</td>", row)
            if head:
                found.append((head.group(1), int(cells[0]), int(cells[1]) if cells[1].isdigit() else -1))
        return found

    busiest = listed("usage-busiest")
    assert busiest[0][0] == max(per_tool, key=lambda k: per_tool[k][0])
    assert all(calls == per_tool[name][0] for name, calls, _ in busiest)
    failing = listed("usage-failing")
    assert failing[0][0] == max(per_tool, key=lambda k: per_tool[k][1])
    assert [(calls, errors) for _n, errors, calls in failing] == [per_tool[name][:2] for name, _e, _c in failing]


def test_the_usage_page_groups_by_tool_surface_client_and_toolkit(client, admin, seeded) -> None:
    client.force_login(admin)
    until = timezone.now() + timedelta(hours=1)
    html = client.get(URL, {"range": "7d", "group": "surface"}).content.decode()
    from toolhub.runs.models import Surface

    expected = direct(seeded["invocations"], key=lambda inv: str(dict(Surface.choices)[inv.surface]), since=_since_7d(), until=until)
    assert _cells(html, "usage-groups") == {k: v[:2] for k, v in expected.items()}
    html = client.get(URL, {"range": "7d", "group": "client"}).content.decode()
    expected = direct(seeded["invocations"], key=lambda inv: inv.client.name if inv.client else "(none)", since=_since_7d(), until=until)
    assert _cells(html, "usage-groups") == {k: v[:2] for k, v in expected.items()}
    html = client.get(URL, {"range": "7d", "group": "toolkit"}).content.decode()
    expected = direct(seeded["invocations"], key=lambda inv: inv.toolkit.slug, since=_since_7d(), until=until)
    assert _cells(html, "usage-groups") == {k: v[:2] for k, v in expected.items()}


def test_a_chosen_day_range_counts_only_those_days(client, admin, seeded) -> None:
    client.force_login(admin)
    today = timezone.now().date()
    day = today - timedelta(days=2)
    response = client.get(URL, {"range": "custom", "since": day.isoformat(), "until": day.isoformat(), "group": "tool"})
    assert response.status_code == 200
    from datetime import UTC, datetime, time

    start = datetime.combine(day, time.min, tzinfo=UTC)
    expected = direct(seeded["invocations"], key=lambda inv: f"{inv.toolkit.slug} · {inv.tool}", since=start, until=start + timedelta(days=1))
    assert _cells(response.content.decode(), "usage-groups") == {k: v[:2] for k, v in expected.items()}


def test_the_csv_export_holds_what_the_page_shows(client, admin, seeded) -> None:
    client.force_login(admin)
    response = client.get(URL, {"range": "7d", "group": "tool", "format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    totals = {r["key"]: r for r in rows if r["bucket_start"] == "total"}
    until = timezone.now() + timedelta(hours=1)
    expected = direct(seeded["invocations"], key=lambda inv: f"{inv.toolkit.slug}/{inv.tool}", since=_since_7d(), until=until)
    assert {k: (int(r["calls"]), int(r["errors"])) for k, r in totals.items()} == {k: v[:2] for k, v in expected.items()}
    for key, (calls, errors, durations) in expected.items():
        assert float(totals[key]["error_rate"]) == pytest.approx(errors / calls, abs=1e-4)
        assert same_bucket(int(totals[key]["p95_ms"]), nearest_rank(durations, 0.95))
    # Per bucket, each tool's days add up to its total, and "(all)" to everything.
    for key, total in totals.items():
        assert sum(int(r["calls"]) for r in rows if r["key"] == key and r["bucket_start"] != "total") == int(total["calls"])
    assert sum(int(r["calls"]) for r in rows if r["key"] == "(all)") == sum(v[0] for v in expected.values())


def test_a_csv_cell_never_starts_a_formula(client, admin, upload, alice, django_user_model) -> None:
    sneaky = django_user_model.objects.create_user("=cmd|calc", "s@example.org", "pw-sneaky-1")
    toolkit = upload(alice, example("library_lookup"))
    seed(toolkits=[toolkit], users=[sneaky], clients=[], count=20)
    fold_all()
    client.force_login(admin)
    body = client.get(URL, {"group": "user", "format": "csv"}).content.decode()
    assert "'=cmd|calc" in body
    assert not any(line.startswith("=") or ",=" in line for line in body.splitlines())


@pytest.mark.parametrize("history", [30, 600])
def test_the_usage_page_makes_the_same_few_queries_however_long_the_history(client, admin, alice, upload, django_assert_num_queries, history) -> None:
    toolkit = upload(alice, example("library_lookup"))
    seed(toolkits=[toolkit], users=[alice, admin], clients=[], count=history, hours=24 * 6)
    fold_all()
    client.force_login(admin)
    client.get(URL)
    # The session, the user; the group's top keys, their buckets, their labels; the totals per
    # bucket; the busiest and the most failing tools: the top ones, their figures, their
    # toolkits' slugs (3 each); the pending packages and reviews of the menu.
    with django_assert_num_queries(14):
        assert client.get(URL, {"range": "30d", "group": "user"}).status_code == 200


def test_the_usage_page_is_for_admins_only(client, alice, carol, seeded) -> None:
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    for person in (carol, alice):
        client.force_login(person)
        assert client.get(URL).status_code == 404
    assert "Usage" not in client.get("/toolkits/").content.decode().split("</nav>")[0]


def test_the_usage_page_answers_only_get(client, admin) -> None:
    client.force_login(admin)
    assert client.post(URL).status_code == 405


@pytest.mark.parametrize("query, message", [
    ({"range": "custom", "since": "2026-03-01"}, "Choose both days"),
    ({"range": "custom", "since": "2026-03-05", "until": "2026-03-01"}, "must end after"),
    ({"range": "custom", "since": "2020-01-01", "until": "2026-01-01"}, "at most 92 days"),
    ({"range": "30d", "bucket": "hour"}, "at most 7 days"),
    ({"range": "forever"}, "Select a valid choice"),
    ({"group": "password"}, "Select a valid choice"),
    ({"range": "custom", "since": "yesterday", "until": "2026-03-01"}, "Enter a valid date"),
    ({"range": "custom", "since": "9999-12-30", "until": "9999-12-31"}, "between the years 1 and 9999."),
])
def test_a_bad_range_is_a_clear_400(client, admin, query, message) -> None:
    client.force_login(admin)
    response = client.get(URL, query)
    assert response.status_code == 400
    assert message in response.content.decode()


# THE TOOLKIT OVERVIEW
# ------------------------------------------------------------------------------


def test_the_overview_shows_its_tools_figures_and_revisions_of_the_last_7_days(client, alice, seeded) -> None:
    toolkit = seeded["first"]
    client.force_login(alice)
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    mine = [inv for inv in seeded["invocations"] if inv.toolkit_id == toolkit.pk]
    until = timezone.now() + timedelta(hours=1)
    expected = direct(mine, key=lambda inv: inv.tool, since=_since_7d(), until=until)
    assert _cells(html, "toolkit-usage-tools") == {k: v[:2] for k, v in expected.items()}
    by_revision = direct(mine, key=lambda inv: f"Revision {inv.revision.number}", since=_since_7d(), until=until)
    assert _cells(html, "toolkit-usage-revisions") == {k: v[:2] for k, v in by_revision.items()}


def test_the_owner_sees_the_last_errors_without_anyone_s_arguments(client, alice, carol, seeded) -> None:
    toolkit = seeded["first"]
    client.force_login(alice)
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    table = re.search(r'<table[^>]*id="toolkit-last-errors".*?</table>', html, re.S).group(0)
    failed = (
        Invocation.objects.filter(toolkit=toolkit, status__in=["failed", "timed_out"])
        .order_by("-finished_at").select_related("revision")[:10]
    )
    assert table.count("<tr>") == len(failed) + 1
    assert "boom: went wrong" in table and f"<td>{failed[0].revision.number}</td>" in table
    assert "carol-private" not in html
    # Only her own calls link to their page (carol's would be a 404 for her), and no username.
    for inv in failed:
        assert (f"/invocations/{inv.id}/" in table) == (inv.user_id == alice.pk)
    assert "carol" not in table

    # A plain user sees the figures, never the errors.
    client.force_login(carol)
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    assert 'id="toolkit-usage-tools"' in html and 'id="toolkit-last-errors"' not in html
    assert "boom: went wrong" not in html and "carol-private" not in html


def test_an_admin_sees_who_failed_and_links_to_each(client, admin, seeded) -> None:
    toolkit = seeded["first"]
    client.force_login(admin)
    html = client.get(f"/toolkits/{toolkit.slug}/").content.decode()
    table = re.search(r'<table[^>]*id="toolkit-last-errors".*?</table>', html, re.S).group(0)
    latest = Invocation.objects.filter(toolkit=toolkit, status__in=["failed", "timed_out"]).order_by("-finished_at").first()
    assert f"/invocations/{latest.id}/" in table and f"<td>{latest.user.username}</td>" in table


@pytest.mark.parametrize("history", [20, 400])
def test_the_overview_usage_block_adds_the_same_queries_however_long_the_history(
    client, alice, upload, django_assert_num_queries, history
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    toolkit = upload(alice, example("library_lookup"))
    seed(toolkits=[toolkit], users=[alice], clients=[], count=history, hours=24 * 6)
    fold_all()
    client.force_login(alice)
    client.get(f"/toolkits/{toolkit.slug}/")
    with CaptureQueriesContext(connection) as queries:
        client.get(f"/toolkits/{toolkit.slug}/")
    usage = [q["sql"] for q in queries.captured_queries if "usage_usagehour" in q["sql"] or "invocation" in q["sql"].lower()]
    # Tools, revisions (and their numbers), the last errors.
    assert len(usage) == 3, usage


# GET /api/v1/usage
# ------------------------------------------------------------------------------


def test_the_api_gives_an_admin_every_group_with_its_buckets(client, admin, seeded) -> None:
    response = client.get("/api/v1/usage", {"group_by": "tool", "bucket": "day"}, **bearer_headers(admin))
    assert response.status_code == 200
    body = response.json()
    assert body["bucket"] == "day" and body["truncated"] is False
    until = timezone.now() + timedelta(hours=1)
    since = _since_7d()
    expected = direct(seeded["invocations"], key=lambda inv: f"{inv.toolkit.slug}/{inv.tool}", since=since, until=until)
    got = {item["key"]: (sum(b["calls"] for b in item["buckets"]), sum(b["errors"] for b in item["buckets"])) for item in body["items"]}
    assert got == {k: v[:2] for k, v in expected.items()}
    assert set(body["items"][0]["buckets"][0]) == {"start", "calls", "errors", "p50_ms", "p95_ms"}


def test_the_api_hourly_buckets_equal_each_hours_invocations(client, admin, seeded) -> None:
    now = timezone.now()
    since = services.floor_hour(now - timedelta(hours=20))
    response = client.get("/api/v1/usage", {"group_by": "surface", "since": since.isoformat(), "bucket": "hour"}, **bearer_headers(admin))
    assert response.status_code == 200
    for item in response.json()["items"]:
        for bucket in item["buckets"]:
            from datetime import datetime

            start = datetime.fromisoformat(bucket["start"].replace("Z", "+00:00"))
            expected = direct(seeded["invocations"], key=lambda inv: inv.surface, since=start, until=start + timedelta(hours=1))
            calls, errors, durations = expected.get(item["key"], (0, 0, []))
            assert (bucket["calls"], bucket["errors"]) == (calls, errors)
            assert same_bucket(bucket["p50_ms"], nearest_rank(durations, 0.5))


def test_an_owner_gets_only_their_own_toolkits_and_never_who_called(client, alice, carol, seeded) -> None:
    response = client.get("/api/v1/usage", {"group_by": "toolkit"}, **bearer_headers(alice))
    assert response.status_code == 200
    assert [item["key"] for item in response.json()["items"]] == [seeded["first"].slug]
    for group in ("user", "client"):
        refused = client.get("/api/v1/usage", {"group_by": group}, **bearer_headers(alice))
        assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "group_by"
    # A plain user owns nothing: no items.
    assert client.get("/api/v1/usage", **bearer_headers(carol)).json()["items"] == []


def test_the_api_refuses_anonymous_callers_client_credentials_and_other_methods(client, admin, seeded) -> None:
    assert client.get("/api/v1/usage").status_code == 401
    _credential, raw = clients.client_create(name="Some app", by=admin)
    assert client.get("/api/v1/usage", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 403
    response = client.post("/api/v1/usage", **bearer_headers(admin))
    assert response.status_code == 405 and "errors" in response.json()


@pytest.mark.parametrize("query, field", [
    ({"group_by": "password"}, "group_by"),
    ({"bucket": "minute"}, "bucket"),
    ({"since": "2026-01-01T00:00:00"}, "since"),
    ({"since": "2026-03-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"}, "since"),
    ({"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
    ({"since": "2026-01-01T00:00:00Z", "until": "2026-02-01T00:00:00Z", "bucket": "hour"}, "bucket"),
    ({"since": "not a time"}, "since"),
    ({"until": "0.5"}, "until"),
    ({"since": "1700000000"}, "since"),
    ({"since": "0001-01-01T00:00:00Z"}, "since"),
    ({"until": "9999-12-31T23:30:00Z"}, "since"),
])
def test_a_bad_query_is_a_400_naming_its_field(client, admin, query, field) -> None:
    response = client.get("/api/v1/usage", query, **bearer_headers(admin))
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] == field


@pytest.mark.parametrize("history", [20, 400])
def test_the_api_makes_the_same_queries_however_long_the_history(client, admin, alice, upload, django_assert_num_queries, history) -> None:
    toolkit = upload(alice, example("library_lookup"))
    seed(toolkits=[toolkit], users=[alice, admin], clients=[], count=history, hours=24 * 6)
    fold_all()
    headers = bearer_headers(admin)
    # The token (and its user), the top keys, their buckets, their labels.
    with django_assert_num_queries(5):
        assert client.get("/api/v1/usage", {"group_by": "user"}, **headers).status_code == 200


def test_unfinished_invocations_are_never_counted(client, admin, seeded) -> None:
    unfinished = Invocation.objects.exclude(status__in=FINISHED).count()
    assert unfinished > 0
    body = client.get("/api/v1/usage", **bearer_headers(admin)).json()
    counted = sum(b["calls"] for item in body["items"] for b in item["buckets"])
    assert counted == Invocation.objects.filter(status__in=FINISHED, finished_at__gte=_since_7d()).count()
