"""`POST /api/v1/agent-runs` and `GET /api/v1/agent-runs/{id}`: who may start and read runs, and
what is refused before anything is queued. (Runs themselves: tests/test_agent_runs.py.)

People (see conftest): admin keeps the connections; alice owns the tool toolkit; carol starts
runs; bob may not see carol's runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Group

from tests.helpers import broker_at
from tests.test_api_toolkits import Api, _api, _is_error
from toolhub.agents import services
from toolhub.agents.models import AgentRun, AgentRunStatus, Use
from toolhub.toolkits.models import Status

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "toolhub" / "toolkits" / "demo"
CALC = '''"""
title: Calc
"""


class Tools:
    def add(self, a: int, b: int) -> str:
        """Add."""
        return str(a + b)
'''


def _ready(toolkit):
    # These tests never run anything: mark the revision ready as a build would.
    revision = toolkit.latest_revision()
    revision.status = Status.READY
    revision.save()
    toolkit.current_revision = revision
    toolkit.save()
    return toolkit


@pytest.fixture
def world(admin, alice, upload):
    _ready(upload(alice, CALC, "calc"))
    _ready(upload(admin, (DEMO / "function_calling.py").read_text(), "function_calling"))
    return services.connection_create(
        data=services.ConnectionInput(name="local", base_url="http://127.0.0.1:9/v1", models=["m1"]), by=admin
    )


def _body(**extra):
    return {"connection": "local", "model": "m1", "strategy": "function_calling",
            "tools": [{"toolkit": "calc", "tool": "add"}], "query": "1 + 1?", "max_iterations": 5, **extra}


def test_it_queues_a_run_and_its_user_reads_it(world, carol):
    api = _api(carol)
    response = api.post("/agent-runs", _body())
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued"
    run = AgentRun.objects.get(pk=body["id"])
    assert (run.user, run.model, run.max_iterations) == (carol, "m1", 5)
    assert run.tools == [{"toolkit": "calc", "tool": "add", "name": "calc__add"}]
    read = api.get(f"/agent-runs/{run.id}").json()
    assert read["status"] == "queued" and read["answer"] is None and read["log"] == []
    assert read["tools"] == run.tools and read["invocations"] == []


def test_a_broker_that_is_down_answers_503_and_the_run_is_failed_not_queued(world, carol):
    with broker_at("redis://127.0.0.1:1/0"):
        response = _api(carol).post("/agent-runs", _body())
    assert response.status_code == 503, response.content
    run = AgentRun.objects.get()
    assert run.status == AgentRunStatus.FAILED and run.finished_at is not None
    assert run.error == "No worker could take the run (the broker is unavailable)."


def test_another_user_gets_404_and_admins_may_read(world, carol, bob, admin):
    run_id = _api(carol).post("/agent-runs", _body()).json()["id"]
    _is_error(_api(bob).get(f"/agent-runs/{run_id}"), 404)
    assert _api(admin).get(f"/agent-runs/{run_id}").status_code == 200
    _is_error(_api(carol).get("/agent-runs/not-a-uuid"), 404)


def test_it_requires_authentication(world):
    _is_error(Api(None).post("/agent-runs", _body()), 401)
    assert not AgentRun.objects.exists()


def test_it_rejects_a_wrong_method(world, carol):
    _is_error(_api(carol).delete("/agent-runs"), 405)


@pytest.mark.parametrize(("extra", "field"), [
    ({"model": "not-offered"}, "model"),
    ({"query": "   "}, "query"),
    ({"max_iterations": 0}, "max_iterations"),
    ({"max_iterations": 51}, "max_iterations"),
    ({"strategy": "calc"}, "strategy"),
    ({"strategy": "nope"}, "strategy"),
    ({"tools": [{"toolkit": "calc", "tool": "sub"}]}, "tools"),
    ({"tools": [{"toolkit": "function_calling", "tool": "_invoke"}]}, "tools"),
    ({"tools": [{"toolkit": "calc", "tool": f"t{i}"} for i in range(21)]}, "tools"),
])
def test_it_refuses_bad_requests_and_queues_nothing(world, carol, extra, field):
    errors = _is_error(_api(carol).post("/agent-runs", _body(**extra)), 400)
    assert field in {e["field"] for e in errors}
    assert not AgentRun.objects.exists()


def test_a_connection_the_user_may_not_use_is_404(world, carol, admin):
    Group.objects.create(name="Research")
    services.connection_update(connection=world, data=services.ConnectionInput(
        name="local", base_url=world.base_url, models=["m1"], use=Use.GROUPS, groups=["Research"]))
    errors = _is_error(_api(carol).post("/agent-runs", _body()), 404)
    assert errors[0]["field"] == "connection"
    carol.groups.add(Group.objects.get(name="Research"))
    assert _api(carol).post("/agent-runs", _body()).status_code == 202
    _is_error(_api(carol).post("/agent-runs", _body(connection="missing")), 404)


def test_a_toolkit_the_user_may_not_use_cannot_be_given(world, carol):
    from toolhub.toolkits.models import Toolkit
    from toolhub.toolkits.models import Use as ToolkitUse

    Toolkit.objects.filter(slug="calc").update(use=ToolkitUse.ADMINS)
    errors = _is_error(_api(carol).post("/agent-runs", _body()), 400)
    assert errors[0]["field"] == "tools"


def test_the_rate_limit_answers_429(world, carol, settings):
    settings.TOOLHUB_AGENT_RUNS_PER_HOUR = 2
    api = _api(carol)
    assert api.post("/agent-runs", _body()).status_code == 202
    assert api.post("/agent-runs", _body()).status_code == 202
    errors = _is_error(api.post("/agent-runs", _body()), 429)
    assert "2 agent runs in the last hour" in errors[0]["message"]
    assert AgentRun.objects.count() == 2
