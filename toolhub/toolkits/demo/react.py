"""
title: ReAct
author: ToolHub
version: 1.0.0
description: An agent strategy for models without native tool calls: the model writes Thought, Action and Action Input lines, ToolHub runs the action and feeds back the Observation, until the model writes a Final Answer.
"""

import itertools
import json
import re

from toolhub_agent import AgentStrategy

INSTRUCTIONS = """Answer the question as well as you can. You have these tools:

{tools}

Use this format:

Thought: what you think about next
Action: the name of one tool, exactly as listed
Action Input: the tool's arguments as one JSON object
Observation: (the tool's result; ToolHub writes this line for you)

... (Thought, Action, Action Input and Observation may repeat) ...

Thought: I know the final answer
Final Answer: the answer to the question

Question: {query}"""

ACTION = re.compile(r"^Action:\s*(?P<name>\S+)\s*$", re.MULTILINE)
ACTION_INPUT = re.compile(r"^Action Input:\s*(?P<input>.*?)\s*(?:^Observation:|\Z)", re.MULTILINE | re.DOTALL)
FINAL = re.compile(r"^Final Answer:\s*(?P<answer>.*)\Z", re.MULTILINE | re.DOTALL)


def describe(tools):
    lines = []
    for tool in tools:
        lines.append(f"- {tool.name}: {tool.description} Arguments (JSON schema): {json.dumps(tool.parameters)}")
    return "\n".join(lines) or "(no tools)"


def parse_arguments(text):
    text = text.strip().strip("`").removeprefix("json").strip()
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ReAct(AgentStrategy):
    def _invoke(self, parameters):
        prompt = INSTRUCTIONS.format(tools=describe(parameters.tools), query=parameters.query)
        messages = [{"role": "user", "content": prompt}]
        # No limit here: ToolHub refuses the model call past `max_iterations` and ends the run.
        for round_number in itertools.count(1):
            round_log = self.create_log_message(f"Round {round_number}", {})
            yield round_log
            answer = self.session.model.invoke(messages=messages, stop=["Observation:"])
            text = answer.content
            final = FINAL.search(text)
            action = ACTION.search(text)
            if final and not action:
                yield self.finish_log_message(round_log, data={"thought": text})
                yield self.create_text_message(final.group("answer").strip())
                return
            messages.append({"role": "assistant", "content": text})
            if action is None:
                observation = "Write an Action and an Action Input line, or a Final Answer line."
                yield self.finish_log_message(round_log, status="error", error=observation, data={"thought": text})
            else:
                found = ACTION_INPUT.search(text, action.end())
                arguments = parse_arguments(found.group("input")) if found else {}
                call_log = self.create_log_message(
                    f"Call {action.group('name')}", {"arguments": arguments}, parent=round_log
                )
                yield call_log
                if arguments is None:
                    observation = "Error: the Action Input is not one JSON object."
                else:
                    observation = self.session.tool.invoke(action.group("name"), arguments)
                failed = observation.startswith("Error: ")
                yield self.finish_log_message(
                    call_log, status="error" if failed else "success", data={"result": observation}
                )
                yield self.finish_log_message(round_log, data={"thought": text})
            messages.append({"role": "user", "content": f"Observation: {observation}"})
