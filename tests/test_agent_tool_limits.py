"""An agent run's tool calls go through the same door as every other invocation (readiness,
arguments, the user's fair use) and are counted by the host: per run, per model answer, and in
at most `max_iterations` rounds. Each test fails on a host that created the tool calls' rows
directly and counted only model calls.

People (see conftest and tests/test_agent_runs.py): alice owns the tool toolkit, admin owns the
strategies and the model connection, carol starts the runs."""

from __future__ import annotations

import pytest

from tests.model_server import completion
from tests.test_agent_runs import ready, run_here, setup, start  # noqa: F401 - fixtures
from toolhub.runs.models import Invocation
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.sandbox, pytest.mark.django_db(transaction=True)]

# Calls the tool until the host stops it, without ever asking the model.
LOOPING = '''"""
title: Looping
"""
from toolhub_agent import AgentStrategy


class Looping(AgentStrategy):
    def _invoke(self, parameters):
        answers = []
        for _ in range(40):
            answers.append(self.session.tool.invoke("calc__add", {"a": 1, "b": 2}))
        yield self.create_text_message(" | ".join(answers))
'''

# A tool, one model call, then a tool again: the second tool round.
TWO_ROUNDS = '''"""
title: Two rounds
"""
from toolhub_agent import AgentStrategy


class TwoRounds(AgentStrategy):
    def _invoke(self, parameters):
        first = self.session.tool.invoke("calc__add", {"a": 1, "b": 2})
        self.session.model.invoke([{"role": "user", "content": first}])
        second = self.session.tool.invoke("calc__add", {"a": 3, "b": 4})
        yield self.create_text_message(f"{first} then {second}")
'''


@pytest.fixture
def looping(setup, admin, ready):  # noqa: F811 - the fixture imported above
    ready(admin, LOOPING, "looping")


def test_a_strategy_looping_on_a_tool_without_the_model_is_stopped(looping, carol, settings):
    settings.TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER = 3
    run = run_here(start(carol, strategy="looping", max_iterations=1))
    assert (run.status, run.limit) == ("failed", "tools_per_answer")
    assert run.error == ("3 tools were called after one model answer (TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER); "
                         "the run stops here.")
    assert len(run.invocations) == 3 and Invocation.objects.count() == 3
    assert run.usage["model_calls"] == 0


def test_one_model_answer_with_many_tool_calls_is_capped(setup, carol, model_server, settings):  # noqa: F811
    settings.TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER = 2
    calls = [{"id": f"call_{i}", "name": "calc__add", "arguments": {"a": i, "b": 1}} for i in range(6)]
    model_server.replies = [completion(tool_calls=calls), completion("done")]
    run = run_here(start(carol, max_iterations=5))
    assert (run.status, run.limit) == ("failed", "tools_per_answer")
    assert Invocation.objects.count() == 2


def test_the_tool_calls_of_a_run_are_capped(looping, carol, settings):
    settings.TOOLHUB_AGENT_MAX_TOOL_CALLS = 4
    run = run_here(start(carol, strategy="looping", max_iterations=1))
    assert (run.status, run.limit) == ("failed", "tool_calls")
    assert run.error == "The run made 4 tool calls (TOOLHUB_AGENT_MAX_TOOL_CALLS); it stops here."
    assert Invocation.objects.count() == 4


def test_max_iterations_bounds_the_rounds_of_tool_calls(setup, admin, ready, carol, model_server):  # noqa: F811
    ready(admin, TWO_ROUNDS, "two_rounds")
    model_server.replies = [completion("fine")]
    run = run_here(start(carol, strategy="two_rounds", max_iterations=1))
    assert (run.status, run.limit) == ("failed", "max_iterations")
    assert run.error == "Tools were called in max_iterations (1) rounds; the run stops here."
    assert Invocation.objects.count() == 1


def test_tool_calls_count_against_the_users_fair_use(looping, carol, settings):
    settings.TOOLHUB_USER_INVOCATIONS_PER_MINUTE = 2
    run = run_here(start(carol, strategy="looping", max_iterations=1))
    # Two ran; the third and later were refused by the same check as the API's, and the
    # strategy was told why (it answers with what it got) until the host's own cap stopped it.
    assert Invocation.objects.filter(user=carol).count() == 2
    refused = next(n for n in run.log if n["label"] == "Tool calc__add" and n["status"] == "error")
    assert refused["data"]["error"].startswith("refused: At most 2 invocations a minute")
    assert run.limit == "tools_per_answer"


def test_an_agent_tool_call_runs_with_the_users_settings_through_the_service(setup, carol, model_server):  # noqa: F811
    store_values(toolkit=setup, values={"offset": 7}, user=carol)
    model_server.replies = [
        completion(tool_calls=[{"id": "c1", "name": "calc__add", "arguments": {"a": 1, "b": 1}}]),
        completion("9"),
    ]
    run = run_here(start(carol))
    (invocation,) = Invocation.objects.all()
    assert (run.status, invocation.surface, invocation.result) == ("succeeded", "agent", "9")
