"""Agent runs end to end: a strategy plugin in its sandbox, a real OpenAI-compatible HTTP server
(tests/model_server.py, scripted answers, every request recorded) reached through the real
`openai` client, and each tool call run in that tool's own sandbox as the run's user. Most tests
run the worker's task `run_agent` in this process; the `worker` test goes through the API to a
real Celery worker process.

People (see conftest): alice owns the tool toolkit, admin owns the strategies and the model
connection, carol starts the runs with UserValves of her own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import start_worker
from tests.model_server import completion
from tests.sandbox_fixtures import require_sandbox
from toolhub import heartbeat
from toolhub.accounts.models import ApiToken
from toolhub.agents import services
from toolhub.agents.models import AgentRun
from toolhub.agents.tasks import run_agent
from toolhub.runs.models import Invocation, RunStatus
from toolhub.toolkits.models import Status
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]

DEMO = Path(__file__).resolve().parent.parent / "toolhub" / "toolkits" / "demo"
KEY = "sk-agent-0123456789abcdef"

CALC = '''"""
title: Calc
description: Arithmetic for agents.
"""
from pydantic import BaseModel


class Tools:
    class UserValves(BaseModel):
        offset: int = 0

    def add(self, a: int, b: int, __user__: dict) -> str:
        """Add two whole numbers (plus the caller's offset)."""
        return str(a + b + __user__["valves"].offset)
'''

# A strategy that tries to call a tool nobody gave the run, then answers with what it got.
SNEAKY = '''"""
title: Sneaky
"""
from toolhub_agent import AgentStrategy


class Sneaky(AgentStrategy):
    def _invoke(self, parameters):
        yield self.create_text_message(self.session.tool.invoke("calc__add", {"a": 1, "b": 2}))
'''

CRASHING = '''"""
title: Crashing
"""
from toolhub_agent import AgentStrategy


class Crashing(AgentStrategy):
    def _invoke(self, parameters):
        log = self.create_log_message("Thinking", {})
        yield log
        raise RuntimeError("the strategy broke")
'''


@pytest.fixture(autouse=True)
def _sandbox_available():
    require_sandbox()


@pytest.fixture
def ready(upload, build):
    def _ready(user, source: str, slug: str | None = None):
        toolkit = build(upload(user, source, slug))
        revision = toolkit.current_revision
        assert revision.status == Status.READY, (revision.status_detail, revision.traceback)
        return toolkit

    return _ready


@pytest.fixture
def setup(ready, admin, alice, carol, model_server):
    """A tool, the function-calling strategy, a connection to the scripted server, and carol's
    own UserValves for the tool (offset 1000: her results tell her valves were used)."""
    calc = ready(alice, CALC, "calc")
    ready(admin, (DEMO / "function_calling.py").read_text(), "function_calling")
    services.connection_create(
        data=services.ConnectionInput(name="scripted", base_url=model_server.base_url, models=["scripted-1"], api_key=KEY),
        by=admin,
    )
    store_values(toolkit=calc, values={"offset": 1000}, user=carol)
    return calc


def start(user, *, strategy="function_calling", tools=(("calc", "add"),), max_iterations=5, query="What is 40 + 2?"):
    return services.agent_run_create(
        user=user, connection="scripted", model="scripted-1", strategy=strategy,
        tools=[{"toolkit": k, "tool": t} for k, t in tools], query=query, max_iterations=max_iterations,
    )


def run_here(run: AgentRun) -> AgentRun:
    run_agent.run(str(run.id))
    return AgentRun.objects.get(pk=run.pk)


def labels(run: AgentRun) -> list[tuple[str, str, str | None]]:
    return [(n["label"], n["status"], n["parent_id"]) for n in run.log]


TOOL_THEN_ANSWER = [
    completion(tool_calls=[{"id": "call_1", "name": "calc__add", "arguments": {"a": 40, "b": 2}}],
               usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}),
    completion("40 + 2 is 1042, with your offset.", usage={"prompt_tokens": 70, "completion_tokens": 12, "total_tokens": 82}),
]


def test_a_tool_call_then_an_answer(setup, carol, model_server):
    model_server.replies = list(TOOL_THEN_ANSWER)
    run = run_here(start(carol))

    assert (run.status, run.error, run.answer) == ("succeeded", "", "40 + 2 is 1042, with your offset.")
    assert labels(run) == [
        ("Round 1", "success", None),
        ("Model call 1", "success", "s-s1"),
        ("Call calc__add", "success", "s-s1"),
        ("Tool calc__add", "success", "s-s2"),
        ("Round 2", "success", None),
        ("Model call 2", "success", "s-s3"),
    ]
    model_node = run.log[1]["data"]
    assert model_node["usage"]["total_tokens"] == 60
    assert model_node["tool_calls"] == [{"name": "calc__add", "arguments": '{"a": 40, "b": 2}'}]
    assert run.usage == {"model_calls": 2, "tool_calls": 1, "prompt_tokens": 120, "completion_tokens": 22,
                         "total_tokens": 142}

    # The tool ran in its own sandbox as carol, with her UserValves, as a recorded invocation.
    (invocation_id,) = run.invocations
    invocation = Invocation.objects.get(pk=invocation_id)
    assert (invocation.user, invocation.toolkit.slug, invocation.tool) == (carol, "calc", "add")
    assert (invocation.status, invocation.result, invocation.arguments) == (RunStatus.SUCCEEDED, "1042", {"a": 40, "b": 2})
    assert invocation.cpu_ms is not None
    assert run.log[3]["data"]["invocation"] == invocation_id

    first, second = model_server.chat_requests()
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.body["model"] == "scripted-1"
    assert first.body["messages"][-1] == {"role": "user", "content": "What is 40 + 2?"}
    assert [t["function"]["name"] for t in first.body["tools"]] == ["calc__add"]
    assert first.body["tools"][0]["function"]["description"].startswith("Add two whole numbers")
    # The tool's result went back to the model in the next request.
    assert second.body["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    assert second.body["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "1042"}


def test_a_model_that_calls_an_unknown_tool_is_told_so(setup, carol, model_server):
    model_server.replies = [
        completion(tool_calls=[{"id": "call_x", "name": "shell__rm", "arguments": {"path": "/"}}]),
        completion("I could not do that."),
    ]
    run = run_here(start(carol))
    assert run.status == "succeeded" and run.answer == "I could not do that."
    assert run.invocations == [] and not Invocation.objects.exists()
    tool_node = next(n for n in run.log if n["label"] == "Tool shell__rm")
    assert tool_node["status"] == "error"
    assert tool_node["data"]["error"] == "no tool named 'shell__rm' was given to this run"
    reply = model_server.chat_requests()[1].body["messages"][-1]
    assert reply == {"role": "tool", "tool_call_id": "call_x",
                     "content": "Error: no tool named 'shell__rm' was given to this run"}


def test_max_iterations_stops_a_model_that_never_stops(setup, carol, model_server):
    model_server.replies = [lambda body: completion(tool_calls=[{"name": "calc__add", "arguments": {"a": 1, "b": 1}}])]
    run = run_here(start(carol, max_iterations=3))
    assert run.status == "failed" and run.limit == "max_iterations"
    assert run.error == "The model was called max_iterations (3) times; the run stops here."
    assert len(model_server.chat_requests()) == 3
    assert run.usage["model_calls"] == 3 and len(run.invocations) == 3
    # The tree so far is kept, ending with the refusal under the fourth round.
    assert labels(run)[-2:] == [("Round 4", "start", None), ("Limit reached", "error", "s-s7")]


def test_a_strategy_cannot_call_a_tool_it_was_not_given(setup, admin, ready, carol, model_server):
    ready(admin, SNEAKY, "sneaky")
    run = run_here(start(carol, strategy="sneaky", tools=()))
    assert run.status == "succeeded"
    assert run.answer == "Error: no tool named 'calc__add' was given to this run"
    assert run.invocations == [] and not Invocation.objects.exists()
    assert model_server.requests == []


def test_a_model_error_ends_the_run_with_the_reason_and_the_tree_so_far(setup, carol, model_server):
    model_server.failure = (500, {"error": {"message": f"backend exploded for key {KEY}", "type": "server_error"}})
    run = run_here(start(carol))
    assert run.status == "failed"
    assert run.error.startswith("The model call failed: The endpoint answered HTTP 500")
    assert KEY not in json.dumps({"error": run.error, "log": run.log})
    assert labels(run) == [("Round 1", "start", None), ("Model call 1", "error", "s-s1")]


def test_a_strategy_crash_ends_the_run_with_the_reason(setup, admin, ready, carol):
    ready(admin, CRASHING, "crashing")
    run = run_here(start(carol, strategy="crashing"))
    assert run.status == "failed"
    assert run.error == "The strategy failed: RuntimeError: the strategy broke"
    assert "Traceback" in run.traceback
    assert labels(run) == [("Thinking", "start", None)]


def test_the_token_budget_stops_a_run(setup, carol, model_server, settings):
    settings.TOOLHUB_AGENT_MAX_TOKENS = 50
    model_server.replies = list(TOOL_THEN_ANSWER)
    run = run_here(start(carol))
    assert (run.status, run.limit) == ("failed", "tokens")
    assert len(model_server.chat_requests()) == 1


@pytest.mark.worker
def test_a_run_through_the_api_on_a_real_worker(setup, carol, client, model_server, tmp_path):
    model_server.replies = list(TOOL_THEN_ANSWER)
    _token, raw = ApiToken.issue(user=carol, name="tests")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    worker = start_worker(tmp_path)
    try:
        response = client.post("/api/v1/agent-runs", json.dumps({
            "connection": "scripted", "model": "scripted-1", "strategy": "function_calling",
            "tools": [{"toolkit": "calc", "tool": "add"}], "query": "What is 40 + 2?", "max_iterations": 5,
        }), content_type="application/json", **auth)
        assert response.status_code == 202, response.content
        run_id = response.json()["id"]
        assert response.json()["status"] == "queued"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            body = client.get(f"/api/v1/agent-runs/{run_id}", **auth).json()
            if body["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.3)
    finally:
        worker.kill()
    assert body["status"] == "succeeded", (body, worker.output()[-3000:])
    assert body["answer"] == "40 + 2 is 1042, with your offset." and body["error"] is None
    assert [n["label"] for n in body["log"]] == [
        "Round 1", "Model call 1", "Call calc__add", "Tool calc__add", "Round 2", "Model call 2",
    ]
    assert set(body["log"][0]) == {"id", "parent_id", "label", "status", "data"}
    (invocation_id,) = body["invocations"]
    assert Invocation.objects.get(pk=invocation_id).result == "1042"
    assert body["usage"]["total_tokens"] == 142


def test_the_time_budget_stops_a_slow_model(setup, carol, model_server, settings):
    settings.TOOLHUB_AGENT_MAX_SECONDS = 1.5

    def slow(body):
        time.sleep(4)
        return completion("too late")

    model_server.replies = [slow]
    began = time.monotonic()
    run = run_here(start(carol))
    assert time.monotonic() - began < 4
    assert (run.status, run.limit) == ("failed", "time")
    assert run.error == "The run used its 1.5 s and stops here."
    assert [n["label"] for n in run.log][-1] == "Limit reached"


def test_a_run_beats_while_its_model_takes_its_time(setup, carol, model_server, monkeypatch):
    """The worker's beat runs beside a slow model call (the tool calls' beat, on its timing), so
    the reaper never takes a run that waits on its model for a dead one."""

    monkeypatch.setattr(heartbeat, "EVERY_SECONDS", 0.2)
    seen = []

    def slow(body):
        for _ in range(8):
            time.sleep(0.2)
            seen.append(AgentRun.objects.values_list("heartbeat_at", flat=True).get())
        connection.close()  # this thread's own
        return completion("done")

    model_server.replies = [slow]
    run = run_here(start(carol))
    assert run.status == "succeeded"
    assert len(set(seen)) >= 3, seen


def test_the_reaper_ends_a_run_whose_worker_died(setup, carol):
    from datetime import timedelta

    from django.utils import timezone

    from toolhub.reaper import reap_stale_work

    run = start(carol)
    AgentRun.objects.filter(pk=run.pk).update(status="running", heartbeat_at=timezone.now() - timedelta(minutes=5))
    fresh = start(carol)
    AgentRun.objects.filter(pk=fresh.pk).update(status="running", heartbeat_at=timezone.now())
    assert reap_stale_work.run()["agent_runs"] == 1
    run.refresh_from_db()
    fresh.refresh_from_db()
    assert (run.status, run.error) == ("failed", "The worker running this agent run stopped before it finished.")
    assert fresh.status == "running"
    # A redelivered run is failed, not run twice.
    run_agent.run(str(fresh.id))
    fresh.refresh_from_db()
    assert fresh.status == "failed" and "stopped before it finished" in fresh.error


def test_react_runs_end_to_end_with_a_model_without_tool_calls(setup, admin, ready, carol, model_server):
    ready(admin, (DEMO / "react.py").read_text(), "react")
    model_server.replies = [
        completion('Thought: I should add.\nAction: calc__add\nAction Input: {"a": 40, "b": 2}'),
        completion("Thought: I know the final answer\nFinal Answer: **1042**"),
    ]
    run = run_here(start(carol, strategy="react"))
    assert (run.status, run.answer) == ("succeeded", "**1042**")
    first, second = model_server.chat_requests()
    assert "tools" not in first.body and first.body["stop"] == ["Observation:"]
    assert "calc__add: Add two whole numbers" in first.body["messages"][0]["content"]
    assert second.body["messages"][-1] == {"role": "user", "content": "Observation: 1042"}
    assert [n["label"] for n in run.log] == [
        "Round 1", "Model call 1", "Call calc__add", "Tool calc__add", "Round 2", "Model call 2",
    ]
