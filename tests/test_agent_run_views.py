"""The Agent page, a run's page and its live fragment, and the list of runs.

People (see conftest): admin keeps the connections and sees every run; alice owns the tool
toolkit; carol starts runs; bob may not see carol's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_api_agent_runs import CALC, _ready
from toolhub.agents import services
from toolhub.agents.models import AgentRun

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "toolhub" / "toolkits" / "demo"


@pytest.fixture
def world(admin, alice, upload):
    _ready(upload(alice, CALC, "calc"))
    _ready(upload(admin, (DEMO / "function_calling.py").read_text(), "function_calling"))
    return services.connection_create(
        data=services.ConnectionInput(name="local", base_url="http://127.0.0.1:9/v1", models=["m1", "m2"]), by=admin
    )


@pytest.fixture
def as_carol(client, carol):
    client.force_login(carol)
    return client


def _form(**extra):
    return {"model": "local::m1", "strategy": "function_calling", "tools": ["calc::add"], "max_iterations": "4",
            "query": "What is 1 + 1?", **extra}


def _run(user, **fields) -> AgentRun:
    run = services.agent_run_create(user=user, connection="local", model="m1", strategy="function_calling",
                                    tools=[{"toolkit": "calc", "tool": "add"}], query="1 + 1?")
    AgentRun.objects.filter(pk=run.pk).update(**fields)
    return AgentRun.objects.get(pk=run.pk)


def test_the_agent_page_offers_models_strategies_and_tools(world, as_carol):
    page = as_carol.get("/agent/?toolkit=calc").content.decode()
    assert '<optgroup label="local">' in page and 'value="local::m1"' in page and 'value="local::m2"' in page
    assert '<option value="function_calling" selected>Function calling</option>' in page
    # Opened from a toolkit's Tools tab, its tools come checked.
    assert 'value="calc::add" checked' in page
    # A strategy is not a tool.
    assert "function_calling::" not in page


def test_the_tools_tab_links_to_it(world, as_carol):
    from toolhub.toolkits.models import Revision

    spec = {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}}}
    Revision.objects.filter(toolkit__slug="calc").update(tools=[spec])
    page = as_carol.get("/toolkits/calc/tools/").content.decode()
    assert 'href="/agent/?toolkit=calc"' in page and "Try with a model" in page


def test_starting_a_run_queues_it_and_shows_its_page(world, as_carol, carol):
    response = as_carol.post("/agent/", _form())
    run = AgentRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/agent/runs/{run.id}/"
    assert (run.user, run.model, run.max_iterations, run.query) == (carol, "m1", 4, "What is 1 + 1?")
    page = as_carol.get(response["Location"]).content.decode()
    assert "What is 1 + 1?" in page and "<code>calc__add</code>" in page
    # Still queued: the live part polls.
    assert f'hx-get="/agent/runs/{run.id}/live/"' in page


def test_a_refused_run_shows_why_and_keeps_the_query(world, as_carol):
    response = as_carol.post("/agent/", _form(max_iterations="99", tools=["calc::nope"]))
    assert response.status_code == 400
    page = response.content.decode()
    assert "max_iterations is between 1 and 50." in page and "No tool nope in toolkit calc." in page
    assert "What is 1 + 1?" in page
    assert not AgentRun.objects.exists()


def test_the_live_fragment_shows_the_tree_and_the_answer_as_markdown(world, as_carol, carol):
    run = _run(carol, status="succeeded", answer="**42** <script>alert(1)</script>", usage={
        "model_calls": 2, "tool_calls": 1, "total_tokens": 142}, invocations=[], log=[
        {"id": "s-s1", "parent_id": None, "label": "Round 1", "status": "success", "data": {}},
        {"id": "h-1", "parent_id": "s-s1", "label": "Model call 1", "status": "success", "data": {"answer": "x"}},
        {"id": "h-2", "parent_id": "s-s1", "label": "Tool calc__add", "status": "error", "data": {"error": "boom"}},
    ])
    page = as_carol.get(f"/agent/runs/{run.id}/live/").content.decode()
    assert "hx-get" not in page  # finished: no more polling
    assert page.index("Round 1") < page.index("Model call 1") < page.index("Tool calc__add")
    assert '<li class="log-node log-error" data-node="h-2">' in page
    assert "<strong>42</strong>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "2 model calls, 1 tool calls, 142 tokens" in page


def test_a_failed_run_shows_its_reason(world, as_carol, carol):
    run = _run(carol, status="failed", error="The model was called max_iterations (5) times; the run stops here.")
    page = as_carol.get(f"/agent/runs/{run.id}/").content.decode()
    assert 'id="run-error"' in page and "max_iterations (5)" in page
    assert 'id="run-answer"' not in page


def test_another_users_run_is_404(world, client, carol, bob, admin):
    run = _run(carol)
    client.force_login(bob)
    assert client.get(f"/agent/runs/{run.id}/").status_code == 404
    assert client.get(f"/agent/runs/{run.id}/live/").status_code == 404
    client.force_login(admin)
    assert client.get(f"/agent/runs/{run.id}/").status_code == 200


def test_anonymous_people_are_sent_to_log_in(world, client, carol):
    run = _run(carol)
    for url in ("/agent/", "/agent/runs/", f"/agent/runs/{run.id}/", f"/agent/runs/{run.id}/live/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_it_rejects_wrong_methods(world, as_carol, carol):
    run = _run(carol)
    assert as_carol.post(f"/agent/runs/{run.id}/").status_code == 405
    assert as_carol.post(f"/agent/runs/{run.id}/live/").status_code == 405
    assert as_carol.put("/agent/").status_code == 405


def test_the_list_shows_own_runs_and_its_query_count_is_pinned(world, as_carol, carol, bob, django_assert_num_queries):
    for _ in range(4):
        _run(carol)
    _run(bob)
    # Session, user, count, the page of runs with their strategies.
    with django_assert_num_queries(4):
        page = as_carol.get("/agent/runs/").content.decode()
    assert page.count('href="/agent/runs/') == 4


def test_the_agent_page_query_count_does_not_grow_with_connections(world, admin, as_carol, carol,
                                                                   django_assert_num_queries):
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="Research")
    carol.groups.add(group)
    for i in range(5):
        services.connection_create(data=services.ConnectionInput(
            name=f"g{i}", base_url="http://h/v1", models=["m"], use="groups", groups=["Research"]), by=admin)
    # Session, user, connections, their groups, carol's groups, the toolkits she may use.
    with django_assert_num_queries(6):
        page = as_carol.get("/agent/").content.decode()
    assert page.count("<optgroup") == 6
