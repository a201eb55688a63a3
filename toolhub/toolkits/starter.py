'''The starting point the editor offers for a new toolkit (a working toolkit with Valves,
UserValves, a status line and a citation) and the snippets for the parts most toolkits need.
docs/toolkit-format.md explains the format with the same example.'''

from __future__ import annotations

STARTER = '''"""
title: My toolkit
author: Your name
description: A starting point: one tool with settings, a status line and a citation.
version: 0.1.0
"""

from pydantic import BaseModel, Field


class Tools:
    class Valves(BaseModel):
        """Settings an admin sets once for everyone (API keys belong here)."""

        greeting: str = Field("Hello", description="The word each greeting starts with")

    class UserValves(BaseModel):
        """Settings each person sets for themselves (the toolkit's My settings tab)."""

        punctuation: str = Field("!", description="What ends each greeting")

    def __init__(self):
        self.valves = self.Valves()

    async def greet(self, name: str, __user__: dict = None, __event_emitter__=None) -> str:
        """
        Greet someone by name.
        :param name: Who to greet
        """
        valves = (__user__ or {}).get("valves")
        punctuation = valves.punctuation if valves else "!"
        if __event_emitter__:
            await __event_emitter__({"type": "status", "data": {"description": f"Greeting {name}", "done": False}})
        text = f"{self.valves.greeting}, {name}{punctuation}"
        if __event_emitter__:
            await __event_emitter__({
                "type": "citation",
                "data": {"document": [text], "metadata": [{"source": "greeting"}], "source": {"name": "My toolkit"}},
            })
            await __event_emitter__({"type": "status", "data": {"description": "Done", "done": True}})
        return text
'''

# (key, what it is for, the code), in the order the editor lists them.
SNIPPETS = (
    ("valves", "Valves", '''    class Valves(BaseModel):
        """Settings an admin sets once for everyone."""

        api_key: str = Field("", description="The service's API key")

    def __init__(self):
        self.valves = self.Valves()
'''),
    ("user_valves", "UserValves", '''    class UserValves(BaseModel):
        """Settings each person sets for themselves."""

        language: str = Field("en", description="The language of the answers")

    # In a tool: (__user__ or {}).get("valves").language
'''),
    ("status", "__event_emitter__: status", '''        await __event_emitter__({"type": "status", "data": {"description": "Working…", "done": False}})
'''),
    ("citation", "__event_emitter__: citation", '''        await __event_emitter__({
            "type": "citation",
            "data": {"document": ["the text cited"], "metadata": [{"source": "where"}], "source": {"name": "A source"}},
        })
'''),
    ("confirmation", "__event_call__: confirmation", '''        ok = await __event_call__({"type": "confirmation", "data": {"title": "Go on?", "message": "Really do **this**?"}})
        if ok is not True:
            return "Cancelled."
'''),
    ("input", "__event_call__: input", '''        answer = await __event_call__({"type": "input", "data": {"title": "Which one?", "message": "Name it", "placeholder": "a name"}})
'''),
)
