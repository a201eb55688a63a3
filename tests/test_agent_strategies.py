"""Agent strategies as a kind of single-file plugin: the static checks at upload, and the
runtime's side of a run (toolhub/runtime/agent.py) driven over its real line protocol, with
this test answering the model and tool calls the way the worker does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model_server import completion
from tests.test_runtime import run, write_toolkit
from toolhub.toolkits.source_checks import ToolkitSourceInvalid, parse_toolkit_source

DEMO = Path(__file__).resolve().parent.parent / "toolhub" / "toolkits" / "demo"
FUNCTION_CALLING = str(DEMO / "function_calling.py")
REACT = str(DEMO / "react.py")

TOOLS = [{"name": "calc__add", "description": "Add two numbers.", "toolkit": "calc", "tool": "add",
          "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]


def _agent(source_path: str, query: str = "What is 40 + 2?", tools=TOOLS, max_iterations: int = 5) -> dict:
    return {"op": "agent", "source_path": source_path, "call_timeout": 10,
            "parameters": {"model": {"connection": "c", "model": "m"}, "tools": tools, "query": query,
                           "max_iterations": max_iterations}}


class Host:
    """Answers the runtime's calls from a script and records them."""

    def __init__(self, model_answers: list[dict], tool_answers: dict | None = None):
        self.model_answers = list(model_answers)
        self.tool_answers = tool_answers or {}
        self.calls: list[dict] = []

    def __call__(self, message: dict) -> dict:
        event = message["event"]
        self.calls.append(event)
        if event["type"] == "model.invoke":
            answer = self.model_answers.pop(0)
            reply = {"error": answer["error"]} if "error" in answer else {"value": answer}
        else:
            reply = {"value": self.tool_answers.get(event["data"]["name"], "no such tool")}
        return {"kind": "call_result", "call_id": message["call_id"], **reply}


def _logs(result) -> list[tuple[str, str, str | None]]:
    return [(e["data"]["label"], e["data"]["status"], e["data"]["parent_id"]) for e in result.events() if e["type"] == "log"]


# -- static checks ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FUNCTION_CALLING, REACT])
def test_the_demo_strategies_pass_the_static_checks(path):
    parsed = parse_toolkit_source(Path(path).read_bytes())
    assert parsed.kind == "agent_strategy"
    assert parsed.tool_names == []
    assert parsed.requirements == []


STRATEGY = '''"""
title: Mine
"""
from toolhub_agent import AgentStrategy


{body}
'''


@pytest.mark.parametrize(("body", "needle"), [
    ("class A(AgentStrategy):\n    pass", "has no `_invoke(self, parameters)` method"),
    ("class A(AgentStrategy):\n    async def _invoke(self, parameters):\n        yield 1", "must be a plain `def`"),
    ("class A(AgentStrategy):\n    def _invoke(self, parameters):\n        return 1", "never yields"),
    ("class A(AgentStrategy):\n    def _invoke(self):\n        yield 1", "takes `(self, parameters)`"),
    ("class A(AgentStrategy):\n    def _invoke(self, p):\n        yield 1\n\n\nclass B(AgentStrategy):\n"
     "    def _invoke(self, p):\n        yield 1", "is a second AgentStrategy subclass"),
])
def test_a_broken_strategy_is_refused_with_its_line(body, needle):
    with pytest.raises(ToolkitSourceInvalid) as caught:
        parse_toolkit_source(STRATEGY.format(body=body))
    (error,) = caught.value.errors
    assert needle in error.message
    assert error.line is not None


def test_a_file_with_nothing_names_the_strategy_base_too():
    with pytest.raises(ToolkitSourceInvalid) as caught:
        parse_toolkit_source('"""\ntitle: x\n"""\nclass Nothing:\n    pass\n')
    assert "AgentStrategy" in caught.value.errors[0].message


# -- the runtime --------------------------------------------------------------------------


def test_a_strategy_introspects_as_its_own_kind():
    final = run({"op": "introspect", "source_path": FUNCTION_CALLING}).final
    assert final["kind_of_toolkit"] == "agent_strategy"
    assert final["tools"] == []


def test_a_strategy_is_not_a_tool():
    final = run({"op": "invoke", "source_path": FUNCTION_CALLING, "tool": "_invoke", "arguments": {}}).final
    assert final["kind"] == "error" and final["error"].startswith("ToolNotFound")


def test_function_calling_calls_the_tool_and_sends_its_result_back():
    host = Host(
        [completion(tool_calls=[{"id": "call_7", "name": "calc__add", "arguments": {"a": 40, "b": 2}}]),
         completion("The answer is 42.")],
        {"calc__add": "42"},
    )
    result = run(_agent(FUNCTION_CALLING), host)
    assert result.final == {"kind": "result", "result": "The answer is 42.", "result_type": "text"}
    assert [c["type"] for c in host.calls] == ["model.invoke", "tool.invoke", "model.invoke"]
    first, tool, second = (c["data"] for c in host.calls)
    assert first["tools"] == [{"type": "function", "function": {"name": "calc__add", "description": "Add two numbers.",
                                                               "parameters": TOOLS[0]["parameters"]}}]
    assert first["messages"][-1] == {"role": "user", "content": "What is 40 + 2?"}
    assert tool["name"] == "calc__add" and tool["arguments"] == {"a": 40, "b": 2}
    # The tool's result goes back to the model, after the assistant's tool call.
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_7"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_7", "content": "42"}
    assert _logs(result) == [
        ("Round 1", "start", None), ("Call calc__add", "start", "s1"), ("Call calc__add", "success", "s1"),
        ("Round 1", "success", None), ("Round 2", "start", None), ("Round 2", "success", None),
    ]
    # Each call names the innermost open node, so the host hangs its own records under it.
    assert [c["data"]["parent_id"] for c in host.calls] == ["s1", "s2", "s3"]
    assert [e["data"] for e in result.events() if e["type"] == "message"] == [{"content": "The answer is 42."}]


def test_react_parses_actions_and_feeds_back_observations():
    host = Host(
        [completion('Thought: add them\nAction: calc__add\nAction Input: {"a": 40, "b": 2}'),
         completion("Thought: I know the final answer\nFinal Answer: 42")],
        {"calc__add": "42"},
    )
    result = run(_agent(REACT), host)
    assert result.final["result"] == "42"
    first, tool, second = (c["data"] for c in host.calls)
    assert "calc__add: Add two numbers." in first["messages"][0]["content"]
    assert first["tools"] == [] and first["options"] == {"stop": ["Observation:"]}
    assert tool["arguments"] == {"a": 40, "b": 2}
    assert second["messages"][-1] == {"role": "user", "content": "Observation: 42"}


def test_a_refused_model_call_ends_the_strategy_with_the_reason():
    host = Host([completion(tool_calls=[{"name": "calc__add", "arguments": {}}]),
                 {"error": "max_iterations (1) reached"}], {"calc__add": "0"})
    result = run(_agent(FUNCTION_CALLING, max_iterations=1), host)
    assert result.final["kind"] == "error"
    assert result.final["error"] == "ModelInvokeError: max_iterations (1) reached"
    assert ("Round 2", "start", None) in _logs(result)


def test_a_tool_error_goes_back_to_the_model_as_text(tmp_path):
    host = Host([completion(tool_calls=[{"name": "nope", "arguments": {}}]), completion("sorry")])
    host.tool_answers = {}
    result = run(_agent(FUNCTION_CALLING), lambda m: _error_for_tools(host, m))
    assert result.final["result"] == "sorry"
    assert host.calls[2]["data"]["messages"][-1]["content"] == "Error: no tool named 'nope' was given to this run"
    assert ("Call nope", "error", "s1") in _logs(result)


def _error_for_tools(host: Host, message: dict) -> dict:
    if message["event"]["type"] == "tool.invoke":
        host.calls.append(message["event"])
        name = message["event"]["data"]["name"]
        return {"kind": "call_result", "call_id": message["call_id"], "error": f"no tool named {name!r} was given to this run"}
    return host(message)


def test_a_strategy_that_yields_something_else_fails(tmp_path):
    path = write_toolkit(tmp_path, STRATEGY.format(body="class A(AgentStrategy):\n    def _invoke(self, parameters):\n        yield 42"))
    final = run(_agent(path)).final
    assert final["kind"] == "error" and final["error"].startswith("InvalidStrategy")
