"""
title: Function calling
author: ToolHub
version: 1.0.0
description: An agent strategy for models with native tool calls: the model picks tools, ToolHub runs them and sends the results back, until the model answers.
"""

import itertools

from toolhub_agent import AgentStrategy

SYSTEM = "You are a helpful assistant. Use the tools you are given when they help to answer."


class FunctionCalling(AgentStrategy):
    def _invoke(self, parameters):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": parameters.query}]
        tools = [tool.spec for tool in parameters.tools]
        # No limit here: ToolHub refuses the model call past `max_iterations` and ends the run.
        for round_number in itertools.count(1):
            round_log = self.create_log_message(f"Round {round_number}", {})
            yield round_log
            answer = self.session.model.invoke(messages=messages, tools=tools or None)
            if not answer.tool_calls:
                yield self.finish_log_message(round_log, data={"answer": answer.content})
                yield self.create_text_message(answer.content)
                return
            messages.append(answer.message)
            for call in answer.tool_calls:
                call_log = self.create_log_message(
                    f"Call {call.name}", {"arguments": call.arguments}, parent=round_log
                )
                yield call_log
                result = self.session.tool.invoke(call.name, call.arguments)
                failed = result.startswith("Error: ")
                yield self.finish_log_message(
                    call_log, status="error" if failed else "success", data={"result": result}
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            yield self.finish_log_message(round_log, data={"tool_calls": [c.name for c in answer.tool_calls]})
