"""The journey in a real browser: from a toolkit's Tools tab, try its tool with a model;
the run's log tree grows on the page while a real worker runs the strategy and the tool in their
sandboxes against a scripted OpenAI-compatible server, then the answer appears as Markdown."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.model_server import completion
from tests.test_agent_runs import CALC, KEY
from toolhub.agents import services
from toolhub.toolkits.valves import store_values

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.sandbox]

DEMO = Path(__file__).resolve().parent.parent.parent / "toolhub" / "toolkits" / "demo"
RUN_TIMEOUT_MS = 90_000


def _slow_answer(body):
    # The second answer takes its time, so the page shows the tree before the answer.
    time.sleep(4)
    return completion("The sum is **1042**.")


# Asked for before `worker`, so the builds are over before the worker starts.
@pytest.fixture
def agent_world(admin, alice, carol, ready_toolkit, model_server):
    calc = ready_toolkit(alice, CALC, "calc")
    ready_toolkit(admin, (DEMO / "function_calling.py").read_text(), "function_calling")
    services.connection_create(
        data=services.ConnectionInput(name="scripted", base_url=model_server.base_url, models=["scripted-1"], api_key=KEY),
        by=admin,
    )
    store_values(toolkit=calc, values={"offset": 1000}, user=carol)
    model_server.replies = [
        completion(tool_calls=[{"id": "call_1", "name": "calc__add", "arguments": {"a": 40, "b": 2}}]),
        _slow_answer,
    ]
    return calc


def test_a_run_started_from_the_tools_tab_shows_its_tree_grow_and_then_the_answer(
    page: Page, login, carol, agent_world, worker, model_server, shot
) -> None:
    login(carol)
    page.goto("/toolkits/calc/tools/")
    page.get_by_role("link", name="Try with a model").click()
    expect(page.get_by_role("heading", name="Try tools with a model")).to_be_visible()
    expect(page.locator('input[value="calc::add"]')).to_be_checked()
    page.get_by_label("Model").select_option("scripted::scripted-1")
    page.get_by_label("Query").fill("What is 40 + 2?")
    shot("agent-form")
    page.get_by_role("button", name="Start the run").click()

    expect(page.get_by_role("heading", name="Agent run")).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    tree = page.locator("#log-tree")
    # The tool's node is there while the model still thinks about its answer.
    expect(tree.locator(".log-label", has_text="Tool calc__add")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#run-answer")).to_have_count(0)
    # Round 2's nodes may already be in the tree here (the model call starts before the
    # model answers), so growth is shown by the answer arriving in the same document.
    nodes_then = tree.locator(".log-node").count()
    shot("agent-run-growing")

    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=RUN_TIMEOUT_MS)
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded instead of polling"
    expect(page.locator("#run-answer strong")).to_have_text("1042")
    labels = tree.locator(".log-label")
    expect(labels).to_have_text(["Round 1", "Model call 1", "Call calc__add", "Tool calc__add", "Round 2", "Model call 2"])
    assert tree.locator(".log-node").count() >= nodes_then
    expect(page.locator("#run-answer")).to_have_count(1)
    assert page.locator("#agent-live").get_attribute("hx-get") is None, "a finished run still polls"
    shot("agent-run-done")
    # The tool ran as carol with her UserValves: 40 + 2 + her offset of 1000.
    assert model_server.chat_requests()[1].body["messages"][-1]["content"] == "1042"
