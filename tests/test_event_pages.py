"""Long event lists: a run of 480,000 events made its page 25 MB and 30 s
to load. The run page now shows a run's last RUN_PAGE_EVENTS events with links to earlier ones,
and the API pages through them (`GET /api/v1/invocations/{id}/events?after=&limit=`), each page
one query however long the run. Here a run of 5,000 events, stored as the worker stores them."""

from __future__ import annotations

import pytest

from tests.test_api_invocations import bearer, made_invocation, toolkit  # noqa: F401 - fixture
from toolhub.runs.models import Event, RunStatus
from toolhub.runs.selectors import EVENTS_PAGE_MAX
from toolhub.runs.views import RUN_PAGE_EVENTS

pytestmark = pytest.mark.django_db

TOTAL = 5000


def _run_with_events(toolkit, user, n: int = TOTAL, **fields):  # noqa: F811
    invocation = made_invocation(toolkit, user, **fields)
    Event.objects.bulk_create(
        Event(invocation=invocation, seq=seq, type="status", data={"description": f"step {seq:05d}", "done": False})
        for seq in range(1, n + 1)
    )
    return invocation


@pytest.fixture
def long_run(toolkit, carol):  # noqa: F811
    return _run_with_events(toolkit, carol, status=RunStatus.SUCCEEDED, result="cba", result_type="text")


# The run page
# ------------------------------------------------------------------------------


def test_the_run_page_shows_the_last_events_and_links_to_earlier_ones(client, long_run, carol):
    client.force_login(carol)
    response = client.get(long_run.get_absolute_url())
    assert response.status_code == 200
    page = response.content.decode()
    assert len(response.content) < 300_000
    first_shown = TOTAL - RUN_PAGE_EVENTS + 1
    assert f"step {TOTAL:05d}" in page and f"step {first_shown:05d}" in page
    assert f"step {first_shown - 1:05d}" not in page
    assert f"Events {first_shown} to {TOTAL} are shown." in page
    assert f'href="{long_run.get_absolute_url()}?before={first_shown}" id="show-earlier"' in page
    assert 'id="show-latest"' not in page


def test_show_earlier_walks_back_to_the_first_event(client, long_run, carol):
    client.force_login(carol)
    url, seen = f"{long_run.get_absolute_url()}?before={TOTAL - RUN_PAGE_EVENTS + 1}", []
    while url:
        response = client.get(url)
        assert response.status_code == 200
        context = response.context
        seen.append(context["events_shown"])
        assert context["latest_url"] == long_run.get_absolute_url()
        url = context["earlier_url"]
    assert seen[0] == (TOTAL - 2 * RUN_PAGE_EVENTS + 1, TOTAL - RUN_PAGE_EVENTS)
    assert seen[-1] == (1, RUN_PAGE_EVENTS)
    assert len(seen) == TOTAL // RUN_PAGE_EVENTS - 1
    assert 'id="show-earlier"' not in response.content.decode()


def test_an_earlier_look_at_a_running_run_does_not_poll(client, toolkit, carol):  # noqa: F811
    running = _run_with_events(toolkit, carol, n=RUN_PAGE_EVENTS + 10, status=RunStatus.RUNNING)
    client.force_login(carol)
    assert "hx-get=" in client.get(running.get_absolute_url()).content.decode()
    earlier = client.get(f"{running.get_absolute_url()}?before=11").content.decode()
    assert "hx-get=" not in earlier and "step 00010" in earlier and "step 00011" not in earlier


def test_a_short_run_shows_every_event_without_links(client, toolkit, carol):  # noqa: F811
    short = _run_with_events(toolkit, carol, n=3, status=RunStatus.SUCCEEDED)
    client.force_login(carol)
    page = client.get(short.get_absolute_url()).content.decode()
    assert "3 status lines" in page and 'id="events-window"' not in page


@pytest.mark.parametrize("before", ["abc", "-1", "0", "9" * 5000, "٣", "1e3", "99999999999"])
def test_a_nonsense_before_shows_the_latest_events(client, long_run, carol, before):
    client.force_login(carol)
    response = client.get(long_run.get_absolute_url(), {"before": before})
    assert response.status_code == 200
    assert response.context["events_shown"] == (TOTAL - RUN_PAGE_EVENTS + 1, TOTAL)


def test_the_run_page_s_query_count_does_not_grow_with_the_events(client, toolkit, long_run, carol, django_assert_num_queries):  # noqa: F811
    short = _run_with_events(toolkit, carol, n=3, status=RunStatus.SUCCEEDED)
    client.force_login(carol)
    counts = []
    for url in (short.get_absolute_url(), long_run.get_absolute_url(), f"{long_run.get_absolute_url()}?before=2000"):
        with django_assert_num_queries(4) as captured:
            assert client.get(url).status_code == 200
        counts.append(len(captured))
    assert len(set(counts)) == 1


def test_the_run_page_keeps_others_and_anonymous_visitors_out(client, long_run, bob):
    url = f"{long_run.get_absolute_url()}?before=100"
    assert client.get(url).status_code == 302
    client.force_login(bob)
    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 405


# The API
# ------------------------------------------------------------------------------


def _events(client, invocation, headers, **params):
    return client.get(f"/api/v1/invocations/{invocation.id}/events", params, **headers)


def test_the_api_pages_through_every_event_in_order(client, long_run, carol):
    headers, seqs, after, pages = bearer(carol), [], 0, 0
    while after is not None:
        response = _events(client, long_run, headers, after=after, limit=EVENTS_PAGE_MAX)
        assert response.status_code == 200, response.content
        body = response.json()
        assert len(body["items"]) <= EVENTS_PAGE_MAX
        seqs += [e["seq"] for e in body["items"]]
        after, pages = body["next_after"], pages + 1
    assert seqs == list(range(1, TOTAL + 1))
    assert pages == TOTAL // EVENTS_PAGE_MAX
    first = _events(client, long_run, headers, limit=2).json()
    assert first == {
        "items": [{"seq": 1, "type": "status", "data": {"description": "step 00001", "done": False}},
                  {"seq": 2, "type": "status", "data": {"description": "step 00002", "done": False}}],
        "next_after": 2,
    }


def test_the_invocation_holds_the_first_page_and_the_cursor_of_the_rest(client, long_run, toolkit, carol):  # noqa: F811
    body = client.get(f"/api/v1/invocations/{long_run.id}", **bearer(carol)).json()
    assert [e["seq"] for e in body["events"]] == list(range(1, EVENTS_PAGE_MAX + 1))
    assert body["events_next_after"] == EVENTS_PAGE_MAX
    short = _run_with_events(toolkit, carol, n=3, status=RunStatus.SUCCEEDED)
    body = client.get(f"/api/v1/invocations/{short.id}", **bearer(carol)).json()
    assert (len(body["events"]), body["events_next_after"]) == (3, None)


def test_an_events_page_is_a_fixed_number_of_queries(client, long_run, carol, django_assert_num_queries):
    headers = bearer(carol)
    _events(client, long_run, headers)  # the token's first use records when it was used
    counts = []
    for params in ({"limit": 1}, {"limit": EVENTS_PAGE_MAX}, {"after": 4000, "limit": EVENTS_PAGE_MAX}):
        with django_assert_num_queries(3) as captured:
            assert _events(client, long_run, headers, **params).status_code == 200
        counts.append(len(captured))
    assert len(set(counts)) == 1


@pytest.mark.parametrize("params", [
    {"limit": 0}, {"limit": EVENTS_PAGE_MAX + 1}, {"after": -1}, {"after": "abc"}, {"after": 2**40}, {"limit": "1e3"},
])
def test_bad_paging_parameters_get_400(client, long_run, carol, params):
    response = _events(client, long_run, bearer(carol), **params)
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] in ("after", "limit")


def test_the_events_api_keeps_others_and_anonymous_callers_out(client, long_run, bob):
    url = f"/api/v1/invocations/{long_run.id}/events"
    assert client.get(url).status_code == 401
    assert client.get(url, **bearer(bob)).status_code == 404
    assert client.post(url, **bearer(bob)).status_code == 405
    assert client.get("/api/v1/invocations/not-an-id/events", **bearer(bob)).status_code == 404
